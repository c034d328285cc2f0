#!/usr/bin/env python3
"""Golden fixtures for `vitlab attention`: attention maps and attention rollout.

A PyTorch computation of the maps ``vitlab attention`` is to compute (its Rust side is not written yet),
on small randomly initialised models of ``tools/make_fixtures.py`` (the same
reference modules the parity fixtures use), one file per case:

* ``param.<key>``: the model's weights, ``input``: ``[B, C, H, W]`` images;
* ``attention``: ``[B, L, H, T, T]`` softmax attention of every block and head;
* ``query``: ``[B, L, H, N]`` the attention the pooled output reads, per block and
  head, over the N patches: the class token's row for ``pool = "cls"``, the
  mean of all rows (every token's attention, averaged) for ``gap`` and ``map``;
* ``rollout.<fusion>.<ratio>``: ``[B, N]`` attention rollout (Abnar & Zuidema
  2020) with the heads fused by ``mean``/``max``/``min`` and the lowest
  ``ratio`` of each fused matrix's entries discarded, as the common
  implementation (jacobgil/vit-explain) does, never the class token's
  attention to itself; then ``A = (A + I) / 2`` (the residual), each row
  renormalised to sum 1 (vit-explain divides by ``a.sum(dim=-1)`` without
  ``keepdim``, which divides columns, not rows: we renormalise rows, as the
  paper does), and the product through the blocks, first block rightmost.
  The row read is the same query as ``query``.

Run from the repository root (needs torch, numpy, safetensors):

    .venv/bin/python tools/make_attention_fixtures.py [--out DIR]

The output is deterministic (seeded) and committed; CI does not need torch.
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (the reference modules)

RATIOS = (0.0, 0.5, 0.9)
FUSIONS = ("mean", "max", "min")


def record_attention(model: mf.ViT) -> list:
    """Makes every Attention of `model` append its softmax weights to the returned list."""
    maps = []
    for blk in model.blocks:
        blk.attn.record = maps
    return maps


def query_vector(T: int, has_cls: bool) -> torch.Tensor:
    q = torch.zeros(T, dtype=torch.float64)
    if has_cls:
        q[0] = 1.0
    else:
        q[:] = 1.0 / T
    return q


def rollout(attn: torch.Tensor, fusion: str, ratio: float, has_cls: bool) -> torch.Tensor:
    """attn: [L, H, T, T] of one image -> [N] rollout over the patches."""
    T = attn.shape[-1]
    result = torch.eye(T, dtype=torch.float64)
    for layer in attn:
        if fusion == "mean":
            fused = layer.mean(0)
        elif fusion == "max":
            fused = layer.max(0).values
        else:
            fused = layer.min(0).values
        flat = fused.reshape(-1)
        k = int(flat.numel() * ratio)
        if k > 0:
            _, idx = flat.topk(k, largest=False)
            if has_cls:
                idx = idx[idx != 0]
            flat[idx] = 0.0
        a = (fused + torch.eye(T, dtype=torch.float64)) / 2
        a = a / a.sum(dim=-1, keepdim=True)
        result = a @ result
    q = query_vector(T, has_cls)
    row = q @ result
    return row[1:] if has_cls else row


def make_case(out_dir: str, name: str, cfg: dict) -> str:
    torch.manual_seed(mf.seed_of(name))
    model = mf.build_model(cfg)
    mf.randomise(model)
    model.eval()
    x = torch.randn(2, cfg["channels"], cfg["image_size"], cfg["image_size"])
    tensors = {"param." + k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    m64 = model.double()
    maps = record_attention(m64)
    with torch.no_grad():
        m64(x.double())
    attn = torch.stack(maps, dim=1)  # [B, L, H, T, T]
    has_cls = cfg["pool"] == "cls"
    T = attn.shape[-1]
    q = query_vector(T, has_cls)
    query = torch.einsum("t,blhts->blhs", q, attn)
    if has_cls:
        query = query[..., 1:]
    tensors["input"] = x.contiguous()
    tensors["attention"] = attn.float().contiguous()
    tensors["query"] = query.float().contiguous()
    for fusion in FUSIONS:
        for ratio in RATIOS:
            r = torch.stack([rollout(attn[b], fusion, ratio, has_cls) for b in range(attn.shape[0])])
            tensors[f"rollout.{fusion}.{ratio}"] = r.float().contiguous()
    meta = dict(config=json.dumps(cfg, sort_keys=True), weights="stored",
                ratios=json.dumps(list(RATIOS)), fusions=json.dumps(list(FUSIONS)))
    return mf.write(out_dir, name, tensors, meta)


def main():
    out = mf.fixtures_out_dir(__doc__)
    torch.set_num_threads(1)
    small = dict(image_size=32, patch_size=8, depth=3, dim=32, mlp_dim=64, heads=4)
    cases = [
        ("attention_vit_cls", mf.model_config("vit", "default", **small)),
        ("attention_vit22b_cls", mf.model_config("vit22b", "default", **small)),
        ("attention_vit22b-nonorm_cls", mf.model_config("vit22b-nonorm", "default", **small)),
        ("attention_vit_gap", mf.model_config("vit", "default", pool="gap", **small)),
        ("attention_vit22b-code_map", mf.model_config("vit22b-code", "default", pool="map", **small)),
    ]
    for name, cfg in cases:
        path = make_case(out, name, cfg)
        print(f"{os.path.getsize(path):>10,d}  {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
