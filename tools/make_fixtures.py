#!/usr/bin/env python3
"""Write vitlab's golden parity fixtures from a PyTorch reference implementation.

This file is the PyTorch reference for the model definitions in
``docs/MODELS.md``: one configurable ``ViT`` (variants ``vit``, ``vit22b``,
``vit22b-ln``, ``vit22b-code``, ``vit22b-nonorm``; pooling ``cls``/``gap``/``map``; heads
``linear``/``paper``), the ``ViTUnet`` generator and the two CycleGAN
``Discriminator``s, whose ``state_dict`` keys are exactly vitlab's weight-file
keys; and pytorch-fid's Fréchet distance formula (scipy ``sqrtm``). It builds small randomly initialised blocks and models, computes their
outputs and gradients in float64, and writes them (as float32) to safetensors
files that the Rust parity tests (``crates/vitlab/tests/parity.rs``) compare
against.

Run it (from the repository root) with

    .venv/bin/python tools/make_fixtures.py [--out DIR]

(default DIR: ``crates/vitlab/tests/fixtures``). It needs ``torch``, ``numpy``,
``safetensors``, ``timm`` and ``scipy``. The output is deterministic (every fixture is
seeded). The fixtures are committed, so CI and the Rust tests do not need
torch or Python at all; rerun this script only when the model definition or
the fixture set changes.

Fixture format (one safetensors file per fixture):

* ``param.<key>``: every ``state_dict`` entry (float32; ``num_batches_tracked``
  as int64), except for fixtures with ``weights = "det"`` whose weights come
  from :func:`det_values` (reimplemented in Rust) instead of being stored;
* ``input``, ``output`` (train mode; BatchNorm uses batch statistics),
  ``output_eval`` (eval mode, only for models with BatchNorm), ``loss_weight``
  ``R`` and the gradients ``grad.input`` / ``grad.<key>`` (every float
  parameter) of ``loss = sum(output * R)``;
* metadata ``config`` (JSON: ``kind`` = model|block|vitunet|discriminator, the
  variant and every constructor argument) and ``weights`` = stored|det (``timm_vit`` and
  ``paper_code_vit*`` also have ``layout`` = timm|paper-code and store that
  layout's own keys, with eval-mode logits and no gradients).

Besides the fixtures it writes ``det_check.safetensors`` (a few
``det_values`` tensors to unit-test the Rust generator), ``fid.safetensors``
(feature sets ``<case>.a`` / ``<case>.b`` with metadata ``<case>.fid``, their
distance by pytorch-fid's formula) and ``param_counts.json`` (exact parameter
counts per variant and size; under ``generators`` the paper's generators and
the two discriminators).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

VARIANTS = ("vit", "vit22b", "vit22b-ln", "vit22b-code", "vit22b-nonorm")
FAMILY_22B = ("vit22b", "vit22b-ln", "vit22b-code", "vit22b-nonorm")
SIZES = {
    "tiny": (12, 192, 768, 3),
    "small": (12, 384, 1536, 6),
    "base": (12, 768, 3072, 12),
    "large": (24, 1024, 4096, 16),
    "huge": (32, 1280, 5120, 16),
}

# ---------------------------------------------------------------------------
# Reference modules (docs/MODELS.md)
# ---------------------------------------------------------------------------


class Norm(nn.Module):
    """LayerNorm over the last axis with optional weight / bias / centring.

    center=True:  (x - mean) / sqrt(var + eps) * weight + bias (biased var)
    center=False: x / sqrt(mean(x^2) + eps) * weight (+ bias)
    The state_dict holds ``weight`` / ``bias`` only when present.
    """

    def __init__(self, dim: int, weight: bool, bias: bool, center: bool = True, eps: float = 1e-6):
        super().__init__()
        self.dim, self.center, self.eps = dim, center, eps
        self.weight = nn.Parameter(torch.ones(dim)) if weight else None
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x):
        if self.center:
            x = x - x.mean(dim=-1, keepdim=True)
        y = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


def affine_norm(variant: str, dim: int, eps: float, norm_center: bool) -> Norm:
    """An affine LN of a given variant: weight+bias for vit, weight only (and
    optionally uncentred) for the 22B family."""
    if variant == "vit":
        return Norm(dim, weight=True, bias=True, center=True, eps=eps)
    return Norm(dim, weight=True, bias=False, center=norm_center, eps=eps)


class Mlp(nn.Module):
    def __init__(self, dim: int, mlp_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.act = nn.GELU()  # exact (erf) GELU
        self.fc2 = nn.Linear(mlp_dim, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Attention(nn.Module):
    def __init__(self, variant, dim, heads, qkv_bias, attn_scale, norm_eps, norm_center,
                 projections=True):
        super().__init__()
        if dim % heads != 0:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads, self.head_dim = heads, dim // heads
        if attn_scale == "head":
            self.scale = self.head_dim ** -0.5
        elif attn_scale == "width":
            self.scale = dim ** -0.5
        else:
            raise ValueError(f"attn_scale must be head|width, got {attn_scale!r}")
        # vit22b-nonorm: the block's fused projections feed attend() directly.
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias) if projections else None
        if variant in ("vit22b", "vit22b-ln"):
            self.q_norm = affine_norm(variant, self.head_dim, norm_eps, norm_center)
            self.k_norm = affine_norm(variant, self.head_dim, norm_eps, norm_center)
        elif variant in ("vit22b-code", "vit22b-nonorm"):
            self.q_norm = Norm(self.head_dim, weight=False, bias=False, center=True, eps=norm_eps)
            self.k_norm = Norm(self.head_dim, weight=False, bias=False, center=True, eps=norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.proj = nn.Linear(dim, dim) if projections else None
        # A list to append each forward's softmax weights to (tools/make_attention_fixtures.py).
        self.record = None

    def attend(self, qkv):
        """[B, T, 3D] projected q, k, v -> [B, T, D] concatenated heads (no output projection)."""
        B, T, D3 = qkv.shape
        D = D3 // 3
        qkv = qkv.reshape(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [B, H, T, hd]
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        attn = torch.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1)
        if self.record is not None:
            self.record.append(attn.detach())
        return (attn @ v).transpose(1, 2).reshape(B, T, D)

    def forward(self, x):
        return self.proj(self.attend(self.qkv(x)))


class Block(nn.Module):
    def __init__(self, variant, dim, mlp_dim, heads, qkv_bias=None, attn_scale="head",
                 norm_eps=1e-6, norm_center=True):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}")
        if not norm_center and variant not in FAMILY_22B:
            raise ValueError("norm_center=False is a 22B-family option")
        if qkv_bias is None:
            qkv_bias = variant == "vit"
        self.variant = variant
        fused = variant == "vit22b-nonorm"
        if variant not in ("vit22b-code", "vit22b-nonorm"):
            self.norm1 = affine_norm(variant, dim, norm_eps, norm_center)
        if fused:
            # [q ; k ; v ; MLP input] = in_proj(x), one matmul (no bias by default).
            self.in_proj = nn.Linear(dim, 4 * dim, bias=qkv_bias)
        self.attn = Attention(variant, dim, heads, qkv_bias, attn_scale, norm_eps, norm_center,
                              projections=not fused)
        if variant == "vit":
            self.norm2 = affine_norm(variant, dim, norm_eps, norm_center)
        if fused:
            self.mlp_in = nn.Linear(dim, mlp_dim)
            self.mlp_act = nn.GELU()
            self.out_proj = nn.Linear(dim + mlp_dim, dim)
        else:
            self.mlp = Mlp(dim, mlp_dim)
        if variant == "vit22b-ln":
            self.mlp_norm = affine_norm(variant, dim, norm_eps, norm_center)
        if variant == "vit22b-code":
            self.out_norm = Norm(dim, weight=False, bias=False, center=True, eps=norm_eps)

    def forward(self, x):
        v = self.variant
        if v == "vit":
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        if v == "vit22b":
            h = self.norm1(x)
            return x + self.attn(h) + self.mlp(h)
        if v == "vit22b-ln":
            h = self.norm1(x)
            return x + self.attn(h) + self.mlp_norm(self.mlp(h))
        if v == "vit22b-nonorm":
            D = x.shape[-1]
            qkvl = self.in_proj(x)
            a = self.attn.attend(qkvl[..., : 3 * D])
            hidden = self.mlp_act(self.mlp_in(qkvl[..., 3 * D:]))
            return x + self.out_proj(torch.cat([a, hidden], dim=-1))
        # vit22b-code
        return x + self.out_norm(self.attn(x) + self.mlp(x))


class MAPHead(nn.Module):
    """big_vision MAPHead: attention pooling with a learnable probe."""

    def __init__(self, dim, mlp_dim, heads, norm_eps):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.probe = nn.Parameter(torch.zeros(1, 1, dim))
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = Norm(dim, weight=True, bias=True, center=True, eps=norm_eps)
        self.mlp = Mlp(dim, mlp_dim)

    def forward(self, x):
        B, T, D = x.shape
        H, hd = self.heads, self.head_dim
        q = self.q(self.probe.expand(B, -1, -1)).reshape(B, 1, H, hd).transpose(1, 2)
        kv = self.kv(x).reshape(B, T, 2, H, hd).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]
        attn = torch.softmax((q @ k.transpose(-2, -1)) * hd ** -0.5, dim=-1)
        y = self.proj((attn @ v).transpose(1, 2).reshape(B, 1, D))
        y = y + self.mlp(self.norm(y))
        return y[:, 0]


class ViT(nn.Module):
    def __init__(self, variant, image_size, patch_size, channels=3, num_classes=10, depth=12,
                 dim=192, mlp_dim=768, heads=3, pool="cls", head="linear", attn_scale="head",
                 final_norm=True, qkv_bias=None, norm_eps=1e-6, norm_center=True):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}")
        if image_size % patch_size != 0:
            raise ValueError(f"image size {image_size} is not divisible by patch size {patch_size}")
        if pool not in ("cls", "gap", "map"):
            raise ValueError(f"pool must be cls|gap|map, got {pool!r}")
        if head not in ("linear", "paper"):
            raise ValueError(f"head must be linear|paper, got {head!r}")
        self.variant, self.image_size, self.patch_size = variant, image_size, patch_size
        self.pool, self.head_kind = pool, head
        n = (image_size // patch_size) ** 2
        self.patch_embed = nn.Linear(patch_size * patch_size * channels, dim)
        # vit22b-nonorm: one non-affine LN on the patch embeddings (before cls / pos).
        self.embed_norm = (Norm(dim, weight=False, bias=False, center=True, eps=norm_eps)
                           if variant == "vit22b-nonorm" else None)
        if pool == "cls":
            self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
            n += 1
        else:
            self.cls_token = None
        self.pos_embed = nn.Parameter(torch.zeros(1, n, dim))
        self.blocks = nn.ModuleList(
            Block(variant, dim, mlp_dim, heads, qkv_bias, attn_scale, norm_eps, norm_center)
            for _ in range(depth)
        )
        self.norm = affine_norm(variant, dim, norm_eps, norm_center) if final_norm else None
        if pool == "map":
            self.map = MAPHead(dim, mlp_dim, heads, norm_eps)
        if head == "linear":
            self.head = nn.Linear(dim, num_classes)
        else:
            self.head_hidden = nn.Linear(dim, mlp_dim)
            if variant == "vit22b-code":
                self.head_bn = nn.BatchNorm1d(mlp_dim, eps=1e-5, momentum=0.1)
            self.head_act = nn.GELU()
            self.head = nn.Linear(mlp_dim, num_classes)

    def forward(self, img):
        B, C, H, W = img.shape
        p = self.patch_size
        if H != self.image_size or W != self.image_size:
            raise ValueError(f"expected {self.image_size}x{self.image_size} images, got {H}x{W}")
        # b c (h p1) (w p2) -> b (h w) (p1 p2 c)
        x = img.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)
        x = self.patch_embed(x.reshape(B, (H // p) * (W // p), p * p * C))
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
        x = x + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        if self.norm is not None:
            x = self.norm(x)
        if self.pool == "cls":
            x = x[:, 0]
        elif self.pool == "gap":
            x = x.mean(dim=1)
        else:
            x = self.map(x)
        if self.head_kind == "paper":
            x = self.head_hidden(x)
            if hasattr(self, "head_bn"):
                x = self.head_bn(x)
            x = self.head_act(x)
        return self.head(x)


def preset(name: str, variant: str) -> dict:
    if name == "default":
        return dict(head="linear", attn_scale="head", final_norm=True,
                    qkv_bias=(variant == "vit"), norm_eps=1e-6)
    if name == "paper":
        return dict(head="paper", attn_scale="width", final_norm=False, qkv_bias=False, norm_eps=1e-5)
    raise ValueError(name)


# ---------------------------------------------------------------------------
# Deterministic weights (mirrored in Rust)
# ---------------------------------------------------------------------------

M64 = (1 << 64) - 1


def fnv1a64(s: str) -> int:
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def det_values(key: str, shape) -> np.ndarray:
    """Deterministic float32 values for a state_dict entry (see module docs)."""
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    with np.errstate(over="ignore"):
        i = np.arange(1, n + 1, dtype=np.uint64)
        z = np.uint64(fnv1a64(key)) + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = ((z >> np.uint64(40)).astype(np.float64) / 2.0 ** 24 * 2.0 - 1.0).astype(np.float32)
    one, f = np.float32(1.0), np.float32
    if len(shape) == 2:
        v = u * f(1.0 / math.sqrt(shape[1]))
    elif key.endswith("running_var"):
        v = one + f(0.25) * u
    elif len(shape) == 1 and key.endswith(".weight"):
        v = one + f(0.25) * u
    elif len(shape) == 1 and (key.endswith(".bias") or key.endswith("running_mean")):
        v = f(0.1) * u
    else:
        v = f(0.5) * u
    assert v.dtype == np.float32
    return v.reshape(shape)


def assign_det(module: nn.Module) -> None:
    with torch.no_grad():
        for key, t in module.state_dict().items():
            if key.endswith("num_batches_tracked"):
                continue
            t.copy_(torch.from_numpy(det_values(key, t.shape)))


# ---------------------------------------------------------------------------
# Fixture initialisation and writing
# ---------------------------------------------------------------------------


def randomise(module: nn.Module) -> None:
    """Non-trivial random init (Linear layers keep PyTorch's default init)."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (Norm, nn.LayerNorm, nn.BatchNorm1d)):
                if m.weight is not None:
                    m.weight.copy_(1 + 0.25 * (2 * torch.rand_like(m.weight) - 1))
                if m.bias is not None:
                    m.bias.copy_(0.1 * (2 * torch.rand_like(m.bias) - 1))
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.copy_(0.1 * torch.randn_like(m.running_mean))
                m.running_var.copy_(1 + 0.5 * torch.rand_like(m.running_var))
        for name, p in module.named_parameters():
            if name.split(".")[-1] in ("cls_token", "pos_embed", "probe"):
                p.normal_(0.0, 0.5)


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode("utf-8"))


def cfg_json(cfg: dict) -> str:
    return json.dumps(cfg, sort_keys=True)


def run_reference(module: nn.Module, x32: torch.Tensor, stored_weights: bool, seed_tag: str):
    """Compute outputs/grads in float64 and return the fixture tensors (float32)."""
    tensors = {}
    if stored_weights:
        for k, v in module.state_dict().items():
            tensors["param." + k] = v.detach().clone().contiguous()
    has_bn = any(isinstance(m, nn.BatchNorm1d) for m in module.modules())
    m64 = module.double()
    x = x32.double().requires_grad_(True)
    if has_bn:
        m64.eval()
        with torch.no_grad():
            tensors["output_eval"] = m64(x).float()
    m64.train()
    out = m64(x)
    g = torch.Generator().manual_seed(seed_of(seed_tag + "/loss_weight"))
    r32 = torch.randn(out.shape, generator=g, dtype=torch.float32)
    loss = (out * r32.double()).sum()
    loss.backward()
    tensors["input"] = x32.contiguous()
    tensors["output"] = out.detach().float().contiguous()
    tensors["loss_weight"] = r32
    tensors["grad.input"] = x.grad.float().contiguous()
    for k, p in m64.named_parameters():
        tensors["grad." + k] = p.grad.float().contiguous()
    return tensors


_ST_DTYPES = {torch.float32: ("F32", np.float32), torch.int64: ("I64", np.int64)}


def save_safetensors(tensors: dict, path: str, metadata: dict) -> None:
    """Write a safetensors file byte-for-byte deterministically.

    (safetensors' own writer orders the metadata through a hash map, so its
    output differs from run to run.) Tensors are laid out in sorted-name
    order, the JSON header has sorted keys and is space-padded to 8 bytes.
    """
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        code, np_dtype = _ST_DTYPES[t.dtype]
        data = t.numpy().astype(np.dtype(np_dtype).newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    hbytes = json.dumps(header, separators=(",", ":"), sort_keys=False).encode("utf-8")
    hbytes += b" " * (-len(hbytes) % 8)
    with open(path, "wb") as f:
        f.write(len(hbytes).to_bytes(8, "little"))
        f.write(hbytes)
        for b in blobs:
            f.write(b)


def write(out_dir: str, name: str, tensors: dict, metadata: dict) -> str:
    path = os.path.join(out_dir, name + ".safetensors")
    save_safetensors(tensors, path, metadata)
    back = load_file(path)  # round-trip check with the official reader
    assert back.keys() == tensors.keys()
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v.detach().cpu()), k
    return path


def make_block_fixture(out_dir, name, variant, attn_scale="head", norm_center=True):
    torch.manual_seed(seed_of(name))
    cfg = dict(kind="block", variant=variant, dim=32, mlp_dim=64, heads=4,
               qkv_bias=(variant == "vit"), attn_scale=attn_scale, norm_eps=1e-6,
               norm_center=norm_center, tokens=5, batch=2)
    blk = Block(variant, cfg["dim"], cfg["mlp_dim"], cfg["heads"], cfg["qkv_bias"],
                attn_scale, cfg["norm_eps"], norm_center)
    randomise(blk)
    x = torch.randn(cfg["batch"], cfg["tokens"], cfg["dim"])
    t = run_reference(blk, x, True, name)
    return write(out_dir, name, t, dict(config=cfg_json(cfg), weights="stored"))


def model_config(variant, preset_name, **over):
    cfg = dict(kind="model", variant=variant, image_size=64, patch_size=8, channels=3,
               num_classes=10, depth=2, dim=64, mlp_dim=128, heads=4, pool="cls",
               norm_center=True)
    cfg.update(preset(preset_name, variant))
    cfg.update(over)
    return cfg


def build_model(cfg: dict) -> ViT:
    kw = {k: v for k, v in cfg.items() if k not in ("kind",)}
    return ViT(**kw)


def make_model_fixture(out_dir, name, cfg, det=False):
    torch.manual_seed(seed_of(name))
    model = build_model(cfg)
    if det:
        assign_det(model)
    else:
        randomise(model)
    x = torch.randn(2, cfg["channels"], cfg["image_size"], cfg["image_size"])
    t = run_reference(model, x, not det, name)
    return write(out_dir, name, t, dict(config=cfg_json(cfg), weights="det" if det else "stored"))


def timm_to_vitlab(sd: dict) -> dict:
    out = {}
    for k, v in sd.items():
        if k == "patch_embed.proj.weight":
            D = v.shape[0]
            out["patch_embed.weight"] = v.permute(0, 2, 3, 1).reshape(D, -1)
        elif k == "patch_embed.proj.bias":
            out["patch_embed.bias"] = v
        else:
            out[k] = v
    return out


def make_timm_fixture(out_dir, name="timm_vit"):
    import timm.models.vision_transformer as tvt

    torch.manual_seed(seed_of(name))
    tm = tvt.VisionTransformer(img_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=4,
                               mlp_ratio=2, num_classes=10)
    with torch.no_grad():
        for m in tm.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1 + 0.25 * (2 * torch.rand_like(m.weight) - 1))
                m.bias.copy_(0.1 * (2 * torch.rand_like(m.bias) - 1))
            if isinstance(m, nn.Linear) and m.bias is not None:
                # timm zero-inits Linear biases; make them non-trivial.
                m.bias.copy_(0.1 * (2 * torch.rand_like(m.bias) - 1))
        tm.cls_token.normal_(0.0, 0.5)
        tm.pos_embed.normal_(0.0, 0.5)
    tm.eval()
    sd = {k: v.detach().clone() for k, v in tm.state_dict().items()}
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        logits = tm.double()(x.double())

    cfg = dict(kind="model", variant="vit", image_size=32, patch_size=4, channels=3,
               num_classes=10, depth=2, dim=64, mlp_dim=128, heads=4, pool="cls",
               head="linear", attn_scale="head", final_norm=True, qkv_bias=True,
               norm_eps=1e-6, norm_center=True)
    ours = build_model(cfg)
    ours.load_state_dict(timm_to_vitlab(sd), strict=True)
    ours.eval()
    with torch.no_grad():
        mine = ours.double()(x.double())
    err = (mine - logits).abs().max().item()
    assert err < 1e-5, f"timm -> vitlab key mapping mismatch: max |diff| = {err}"
    print(f"timm parity: max |diff| = {err:.3e}")

    t = {"param." + k: v for k, v in sd.items()}
    t["input"] = x
    t["output"] = logits.float()
    return write(out_dir, name, t, dict(config=cfg_json(cfg), weights="stored", layout="timm"))


# ---------------------------------------------------------------------------
# The paper's released code (github.com/HongSungRae/ai602, models/vit.py and
# models/vit22b.py at 10552d0): same computation, its own module tree, so that
# its state_dict keys are the ones users' checkpoints carry. Written from the
# structure of that code (Residual(PreNorm(...)) wrappers, fused to_qkv without
# bias, D^-0.5 attention scale, MLP heads), not copied.
# ---------------------------------------------------------------------------


class _PaperResidual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


class _PaperPreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x):
        return self.fn(self.norm(x))


class _PaperFeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        return self.net(x)


def _paper_attend(qkv, heads, scale, qk_norm=None):
    b, n, three_d = qkv.shape
    d = three_d // 3
    q, k, v = qkv.reshape(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
    if qk_norm is not None:
        q, k = qk_norm(q), qk_norm(k)
    attn = (q @ k.transpose(-1, -2) * scale).softmax(dim=-1)
    return (attn @ v).transpose(1, 2).reshape(b, n, d)


class _PaperAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, dim ** -0.5
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        return self.to_out(_paper_attend(self.to_qkv(x), self.heads, self.scale))


class _PaperParallel22B(nn.Module):
    """y = LN(Attn(x) + MLP(x)) (the residual is added by the wrapper)."""

    def __init__(self, dim, heads, mlp_dim):
        super().__init__()
        self.heads, self.scale = heads, dim ** -0.5
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.parallel = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))
        self.layer_norm = nn.LayerNorm(dim // heads, elementwise_affine=False)
        self.layer_norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        a = self.to_out(_paper_attend(self.to_qkv(x), self.heads, self.scale, self.layer_norm))
        return self.layer_norm2(a + self.parallel(x))


class _PaperTransformer(nn.Module):
    def __init__(self, dim, depth, heads, mlp_dim):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.ModuleList([
                _PaperResidual(_PaperPreNorm(dim, _PaperAttention(dim, heads))),
                _PaperResidual(_PaperPreNorm(dim, _PaperFeedForward(dim, mlp_dim))),
            ])
            for _ in range(depth)
        )

    def forward(self, x):
        for attn, ff in self.layers:
            x = ff(attn(x))
        return x


class _PaperTransformer22B(nn.Module):
    def __init__(self, dim, depth, heads, mlp_dim):
        super().__init__()
        self.layers = nn.ModuleList(
            _PaperResidual(_PaperParallel22B(dim, heads, mlp_dim)) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class PaperCodeViT(nn.Module):
    """The released ViT (is22b=False) or ViT22B (is22b=True, with the BatchNorm head)."""

    def __init__(self, image_size, patch_size, num_classes, dim, depth, heads, mlp_dim,
                 channels=3, is22b=False):
        super().__init__()
        self.patch_size = patch_size
        n = (image_size // patch_size) ** 2
        self.pos_embedding = nn.Parameter(torch.randn(1, n + 1, dim))
        self.patch_to_embedding = nn.Linear(channels * patch_size ** 2, dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        if is22b:
            self.transformer22B = _PaperTransformer22B(dim, depth, heads, mlp_dim)
            self.mlp_head = nn.Sequential(nn.Linear(dim, mlp_dim), nn.BatchNorm1d(mlp_dim),
                                          nn.GELU(), nn.Linear(mlp_dim, num_classes))
        else:
            self.transformer = _PaperTransformer(dim, depth, heads, mlp_dim)
            self.mlp_head = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(),
                                          nn.Linear(mlp_dim, num_classes))

    def forward(self, img):
        b, c, h, w = img.shape
        p = self.patch_size
        x = img.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
        x = self.patch_to_embedding(x.reshape(b, (h // p) * (w // p), p * p * c))
        x = torch.cat([self.cls_token.expand(b, -1, -1), x], dim=1) + self.pos_embedding
        x = self.transformer22B(x) if hasattr(self, "transformer22B") else self.transformer(x)
        return self.mlp_head(x[:, 0])


class _PaperParallel22BV1(nn.Module):
    """The first released ViT-22B block (models/vit22b.py at eeb88f0), residual
    added by the wrapper: [qkv ; l] = to_qkvl(x) (no bias); QK-LN over head_dim
    without affine; out = to_out(cat[attn heads, feed(l)]), feed = Linear + GELU."""

    def __init__(self, dim, heads, mlp_dim):
        super().__init__()
        self.dim, self.heads, self.scale = dim, heads, dim ** -0.5
        self.to_qkvl = nn.Linear(dim, dim * 4, bias=False)
        self.layer_norm = nn.LayerNorm(dim // heads, elementwise_affine=False)
        self.feed = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU())
        self.to_out = nn.Linear(dim + mlp_dim, dim)

    def forward(self, x):
        qkvl = self.to_qkvl(x)
        a = _paper_attend(qkvl[..., : 3 * self.dim], self.heads, self.scale, self.layer_norm)
        return self.to_out(torch.cat([a, self.feed(qkvl[..., 3 * self.dim:])], dim=-1))


class PaperCodeViT22BV1(nn.Module):
    """The first released ViT22B: a non-affine LN after the patch embedding
    (before the cls token and position embedding), the V1 blocks, MLP head
    without BatchNorm."""

    def __init__(self, image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, channels=3):
        super().__init__()
        self.patch_size = patch_size
        n = (image_size // patch_size) ** 2
        self.pos_embedding = nn.Parameter(torch.randn(1, n + 1, dim))
        self.patch_to_embedding = nn.Linear(channels * patch_size ** 2, dim)
        self.layer_norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.transformer22B = nn.Module()
        self.transformer22B.layers = nn.ModuleList(
            _PaperResidual(_PaperParallel22BV1(dim, heads, mlp_dim)) for _ in range(depth))
        self.mlp_head = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, num_classes))

    def forward(self, img):
        b, c, h, w = img.shape
        p = self.patch_size
        x = img.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
        x = self.layer_norm(self.patch_to_embedding(x.reshape(b, (h // p) * (w // p), p * p * c)))
        x = torch.cat([self.cls_token.expand(b, -1, -1), x], dim=1) + self.pos_embedding
        for layer in self.transformer22B.layers:
            x = layer(x)
        return self.mlp_head(x[:, 0])


def make_paper_code_v1_fixture(out_dir, name="paper_code_vit22b_v1"):
    """A checkpoint of the first released ViT22B (vitlab's vit22b-nonorm, paper preset)."""
    torch.manual_seed(seed_of(name))
    m = PaperCodeViT22BV1(image_size=32, patch_size=4, num_classes=10, dim=48, depth=2, heads=3,
                          mlp_dim=96)
    randomise(m)
    m.eval()
    sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        logits = m.double()(x.double())
    cfg = model_config("vit22b-nonorm", "paper", image_size=32, patch_size=4, depth=2, dim=48,
                       mlp_dim=96, heads=3)
    # The same weights in the reference ViT give the same logits (the key table of
    # crates/vitlab/src/models/weights.rs, checked here on the Python side too).
    ours = build_model(cfg)
    table = {"to_qkvl.weight": "in_proj.weight", "feed.0.weight": "mlp_in.weight",
             "feed.0.bias": "mlp_in.bias", "to_out.weight": "out_proj.weight",
             "to_out.bias": "out_proj.bias"}
    mapped = {}
    for k, v in sd.items():
        if k.startswith("transformer22B.layers."):
            i, rest = k[len("transformer22B.layers."):].split(".", 1)
            mapped[f"blocks.{i}.{table[rest[len('fn.'):]]}"] = v
        else:
            mapped[{"pos_embedding": "pos_embed", "cls_token": "cls_token",
                    "patch_to_embedding.weight": "patch_embed.weight",
                    "patch_to_embedding.bias": "patch_embed.bias",
                    "mlp_head.0.weight": "head_hidden.weight", "mlp_head.0.bias": "head_hidden.bias",
                    "mlp_head.2.weight": "head.weight", "mlp_head.2.bias": "head.bias"}[k]] = v
    ours.load_state_dict(mapped, strict=True)
    ours.eval()
    with torch.no_grad():
        mine = ours.double()(x.double())
    err = (mine - logits).abs().max().item()
    assert err < 1e-6 * max(1.0, logits.abs().max().item()), f"v1 key mapping mismatch: {err}"
    print(f"paper-code v1 parity: max |diff| = {err:.3e}")
    t = {"param." + k: v for k, v in sd.items()}
    t["input"] = x
    t["output"] = logits.float()
    return write(out_dir, name, t, dict(config=cfg_json(cfg), weights="stored", layout="paper-code"))


def make_paper_code_fixture(out_dir, name, is22b):
    """A checkpoint in the released code's key layout, its input and eval-mode logits."""
    torch.manual_seed(seed_of(name))
    m = PaperCodeViT(image_size=32, patch_size=4, num_classes=10, dim=48, depth=2, heads=3,
                     mlp_dim=96, is22b=is22b)
    randomise(m)
    m.eval()
    sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        logits = m.double()(x.double())
    variant = "vit22b-code" if is22b else "vit"
    cfg = model_config(variant, "paper", image_size=32, patch_size=4, depth=2, dim=48,
                       mlp_dim=96, heads=3)
    t = {"param." + k: v for k, v in sd.items()}
    t["input"] = x
    t["output"] = logits.float()
    return write(out_dir, name, t, dict(config=cfg_json(cfg), weights="stored", layout="paper-code"))


# ---------------------------------------------------------------------------
# ViTUnet (SPEC §4, docs/MODELS.md "ViTUnet"), written from the SPEC's text
# with PyTorch's own ops: nn.functional.interpolate for the width changes,
# reflection padding, instance_norm.
# ---------------------------------------------------------------------------


class UnetStage(nn.Module):
    def __init__(self, n_blocks, **block):
        super().__init__()
        self.blocks = nn.ModuleList(Block(**block) for _ in range(n_blocks))

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return x


class PadConv(nn.Module):
    """Reflection-pad 1, then a 3x3 convolution."""

    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3)

    def forward(self, x):
        return self.conv(F.pad(x, (1, 1, 1, 1), mode="reflect"))


def _in_relu(x):
    return F.relu(F.instance_norm(x, eps=1e-5))


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv1 = PadConv(ch, ch)
        self.conv2 = PadConv(ch, ch)

    def forward(self, x):
        return x + F.instance_norm(self.conv2(_in_relu(self.conv1(x))), eps=1e-5)


class Refiner(nn.Module):
    def __init__(self, c_in, width, n_res, c_out):
        super().__init__()
        self.in1, self.in2 = PadConv(c_in, width), PadConv(width, 2 * width)
        self.res = nn.ModuleList(ResBlock(2 * width) for _ in range(n_res))
        self.out1, self.out2 = PadConv(2 * width, width), PadConv(width, c_out)

    def forward(self, x):
        x = _in_relu(self.in2(_in_relu(self.in1(x))))
        for blk in self.res:
            x = blk(x)
        return torch.tanh(self.out2(_in_relu(self.out1(x))))


class ViTUnet(nn.Module):
    def __init__(self, variant, depth, dim, mlp_dim, heads, image_size, patch_size, channels=3,
                 refiner_width=64, qkv_bias=None, attn_scale="head", norm_eps=1e-6, norm_center=True):
        super().__init__()
        if depth % 6 or dim % 8 or mlp_dim % 8 or (dim // 8) % heads or image_size % patch_size:
            raise ValueError("invalid ViTUnet configuration")
        self.patch_size, self.channels = patch_size, channels
        n = (image_size // patch_size) ** 2
        self.patch_embed = nn.Linear(patch_size * patch_size * channels, dim)
        self.pos_embed = nn.Parameter(torch.zeros(1, n, dim))

        def stage(div):
            return UnetStage(depth // 6, variant=variant, dim=dim // div, mlp_dim=mlp_dim // div,
                             heads=heads, qkv_bias=qkv_bias, attn_scale=attn_scale,
                             norm_eps=norm_eps, norm_center=norm_center)

        self.encoder = nn.ModuleList(stage(d) for d in (1, 2, 4))
        self.bottleneck = stage(8)
        self.decoder = nn.ModuleList(stage(d) for d in (4, 2, 1))
        self.out_proj = nn.Linear(dim, patch_size * patch_size * channels)
        self.refiner = Refiner(4 * channels, refiner_width, depth // 3, channels)

    def forward(self, img):
        B, C, H, W = img.shape
        p = self.patch_size
        x = img.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 3, 5, 1)
        x = self.patch_embed(x.reshape(B, (H // p) * (W // p), p * p * C)) + self.pos_embed
        skips = []
        for i, st in enumerate(self.encoder):
            if i > 0:
                x = F.interpolate(x, scale_factor=0.5, mode="nearest")
            x = st(x)
            skips.append(x)
        x = self.bottleneck(F.interpolate(x, scale_factor=0.5, mode="nearest"))
        for st in self.decoder:
            x = st(torch.cat([F.interpolate(x, scale_factor=2.0, mode="nearest"), skips.pop()], dim=1))
        y = self.out_proj(x)  # [B, 4N, p*p*C]; token k*N + n is patch n of image k
        y = y.reshape(B * 4, H // p, W // p, p, p, C).permute(0, 5, 1, 3, 2, 4)
        return self.refiner(y.reshape(B, 4 * C, H, W))


def make_vitunet_fixture(out_dir, name, variant):
    torch.manual_seed(seed_of(name))
    cfg = dict(kind="vitunet", variant=variant, depth=6, dim=32, mlp_dim=64, heads=2,
               image_size=8, patch_size=2, channels=3, refiner_width=4,
               qkv_bias=(variant == "vit"), attn_scale="head", norm_eps=1e-6, norm_center=True)
    kw = {k: v for k, v in cfg.items() if k != "kind"}
    model = ViTUnet(**kw)
    randomise(model)
    x = 2 * torch.rand(2, cfg["channels"], cfg["image_size"], cfg["image_size"]) - 1
    t = run_reference(model, x, True, name)
    return write(out_dir, name, t, dict(config=cfg_json(cfg), weights="stored"))


class Discriminator(nn.Module):
    """SPEC §5: the released discriminator (C -> w -> 2w -> w -> C, stride 2 pad 2,
    then to 1 channel, sigmoid) or the 70x70 PatchGAN (w, 2w, 4w, 8w, raw scores)."""

    def __init__(self, kind, channels=3, width=None):
        super().__init__()
        self.kind = kind
        c = channels
        if kind == "released":
            w = width or 16
            layers = [(c, w, 2, 2), (w, 2 * w, 2, 2), (2 * w, w, 2, 2), (w, c, 2, 2), (c, 1, 1, 1)]
        elif kind == "patchgan":
            w = width or 64
            layers = [(c, w, 2, 1), (w, 2 * w, 2, 1), (2 * w, 4 * w, 2, 1), (4 * w, 8 * w, 1, 1), (8 * w, 1, 1, 1)]
        else:
            raise ValueError(kind)
        self.convs = nn.ModuleList(nn.Conv2d(i, o, 4, stride=s, padding=p) for i, o, s, p in layers)

    def forward(self, x):
        for i, conv in enumerate(self.convs[:-1]):
            x = conv(x)
            if not (self.kind == "patchgan" and i == 0):
                x = F.instance_norm(x, eps=1e-5)
            x = F.leaky_relu(x, 0.2)
        x = self.convs[-1](x)
        return torch.sigmoid(x) if self.kind == "released" else x


def make_discriminator_fixture(out_dir, name, kind, width, image_size):
    torch.manual_seed(seed_of(name))
    cfg = dict(kind="discriminator", discriminator=kind, channels=3, width=width, image_size=image_size)
    model = Discriminator(kind, 3, width)
    x = 2 * torch.rand(2, 3, image_size, image_size) - 1
    t = run_reference(model, x, True, name)
    return write(out_dir, name, t, dict(config=cfg_json(cfg), weights="stored"))


def frechet_reference(f1: np.ndarray, f2: np.ndarray) -> float:
    """pytorch-fid's calculate_frechet_distance (scipy sqrtm), in float64."""
    import scipy.linalg
    mu1, mu2 = f1.mean(axis=0), f2.mean(axis=0)
    s1, s2 = np.cov(f1, rowvar=False), np.cov(f2, rowvar=False)
    covmean, _ = scipy.linalg.sqrtm(s1.dot(s2), disp=False)
    covmean = covmean.real
    diff = mu1 - mu2
    return float(diff.dot(diff) + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def make_fid_fixture(out_dir, name="fid"):
    """Two pairs of correlated Gaussian feature sets (16-d with 300 and 250
    samples; 64-d with 100 and 80, near the singular limit) and their FID."""
    g = np.random.default_rng(seed_of(name))
    tensors, meta = {}, {}
    for case, (dim, n1, n2) in {"small": (16, 300, 250), "near_singular": (64, 100, 80)}.items():
        mix1 = g.normal(size=(dim, dim))
        mix2 = mix1 + 0.5 * g.normal(size=(dim, dim))
        f1 = (g.normal(size=(n1, dim)) @ mix1).astype(np.float32)
        f2 = (g.normal(size=(n2, dim)) @ mix2 + 0.3).astype(np.float32)
        tensors[f"{case}.a"] = torch.from_numpy(f1)
        tensors[f"{case}.b"] = torch.from_numpy(f2)
        meta[f"{case}.fid"] = repr(frechet_reference(f1.astype(np.float64), f2.astype(np.float64)))
    return write(out_dir, name, tensors, meta)


def vitunet_param_counts() -> dict:
    """The paper's generators (depth 12, D 384, M 1536, 6 heads, 256 px, patch 16, refiner 64)
    and the two discriminators at their published widths."""
    counts = {}
    for name, variant in (("vitunet", "vit"), ("vit22bunet", "vit22b")):
        with torch.device("meta"):
            model = ViTUnet(variant, 12, 384, 1536, 6, 256, 16, qkv_bias=(variant == "vit"))
        counts[name] = sum(p.numel() for p in model.parameters())
    for kind in ("released", "patchgan"):
        counts[f"discriminator-{kind}"] = sum(p.numel() for p in Discriminator(kind).parameters())
    return counts


def make_det_check(out_dir):
    t = {k: torch.from_numpy(det_values(k, s)) for k, s in [
        ("blocks.0.attn.qkv.weight", (6, 4)),
        ("norm.weight", (5,)),
        ("pos_embed", (1, 3, 2)),
    ]}
    return write(out_dir, "det_check", t, dict(weights="det"))


def count_params(cfg: dict) -> int:
    with torch.device("meta"):
        model = build_model(cfg)
    return sum(p.numel() for p in model.parameters())


def make_param_counts(out_dir):
    settings = {
        "paper": dict(image_size=224, patch_size=16, num_classes=10),
        "default": dict(image_size=32, patch_size=4, num_classes=10),
    }
    result = {"note": "exact parameter counts (parameters only, no buffers), pool cls, 3 channels"}
    for pname, s in settings.items():
        counts = {}
        for variant in VARIANTS:
            counts[variant] = {}
            for size, (depth, dim, mlp, heads) in SIZES.items():
                cfg = model_config(variant, pname, depth=depth, dim=dim, mlp_dim=mlp,
                                   heads=heads, **s)
                counts[variant][size] = count_params(cfg)
        result[pname] = dict(preset=pname, **s, counts=counts)
    expected = {"tiny": 5.67, "small": 22.26, "base": 88.16, "large": 307.47}
    for size, m in expected.items():
        got = result["paper"]["counts"]["vit"][size]
        assert round(got / 1e6, 2) == m, f"paper vit {size}: {got} params, expected {m}M"
    result["generators"] = vitunet_param_counts()
    path = os.path.join(out_dir, "param_counts.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    return path, result


def fixtures_out_dir(doc: str) -> str:
    """The output folder a fixture script was given (``--out``; by default the Rust
    tests' ``crates/vitlab/tests/fixtures``), created; ``doc`` is its docstring."""
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "crates", "vitlab", "tests", "fixtures")
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", default=default_out, help="output directory")
    out = os.path.normpath(ap.parse_args().out)
    os.makedirs(out, exist_ok=True)
    return out


def main():
    out = fixtures_out_dir(__doc__)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

    paths = [make_det_check(out)]
    for v in VARIANTS:
        paths.append(make_block_fixture(out, f"block_{v}", v))
    paths.append(make_block_fixture(out, "block_vit22b_width_nocenter", "vit22b",
                                    attn_scale="width", norm_center=False))
    for v in VARIANTS:
        paths.append(make_model_fixture(out, f"model_{v}_cls_linear", model_config(v, "default")))
    paths.append(make_model_fixture(out, "model_vit_gap_linear", model_config("vit", "default", pool="gap")))
    paths.append(make_model_fixture(out, "model_vit_map_linear", model_config("vit", "default", pool="map")))
    paths.append(make_model_fixture(out, "model_vit22b_map_linear",
                                    model_config("vit22b", "default", pool="map")))
    for v in VARIANTS:
        paths.append(make_model_fixture(out, f"model_{v}_paper", model_config(v, "paper")))
    tiny = model_config("vit", "default", image_size=32, patch_size=4, depth=12, dim=192,
                        mlp_dim=768, heads=3)
    paths.append(make_model_fixture(out, "model_tiny_vit", tiny, det=True))
    paths.append(make_timm_fixture(out))
    paths.append(make_paper_code_fixture(out, "paper_code_vit", is22b=False))
    paths.append(make_paper_code_fixture(out, "paper_code_vit22b", is22b=True))
    paths.append(make_paper_code_v1_fixture(out))
    for v in ("vit", "vit22b"):
        paths.append(make_vitunet_fixture(out, f"vitunet_{v}", v))
    paths.append(make_discriminator_fixture(out, "discriminator_released", "released", 4, 24))
    paths.append(make_discriminator_fixture(out, "discriminator_patchgan", "patchgan", 4, 32))
    paths.append(make_fid_fixture(out))
    pc_path, pc = make_param_counts(out)
    paths.append(pc_path)

    print("paper preset, vit:", {s: pc["paper"]["counts"]["vit"][s] for s in SIZES})
    total = 0
    for p in paths:
        size = os.path.getsize(p)
        total += size
        print(f"{size:>12,d}  {os.path.relpath(p)}")
    print(f"{total:>12,d}  total")


if __name__ == "__main__":
    main()
