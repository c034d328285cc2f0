#!/usr/bin/env python3
"""Golden fixtures for vitlab's policy augmentations (crates/vitlab/src/data/autoaugment).

Applies torchvision's AutoAugment operations (``torchvision.transforms.autoaugment._apply_op``
on **PIL images**, NEAREST interpolation, fill None, the usual CIFAR pipeline) at fixed
magnitudes taken from torchvision's own magnitude bins, to three small deterministic
test images, and writes inputs and expected outputs to

    crates/vitlab/tests/fixtures/augment/augment.safetensors

Tensors (all uint8, planar CHW like vitlab's images):
  ``input/<img>``   [C, H, W]        the test image
  ``output/<img>``  [N, C, H, W]     one output per op case on that image
  ``policy/<img>``  [M, C, H, W]     AutoAugment sub-policies with fixed decisions
The safetensors metadata key ``index`` holds JSON: the op cases (op name, signed f32
magnitude, the bin it came from), the policy cases, torchvision's magnitude bins
(``_augmentation_space``) for the sizes used, the AutoAugment sub-policy tables and the
RandAugment / TrivialAugmentWide op orders, and the versions that made the file.

Images: ``a`` 32x32 RGB gradient + noise (channel ranges differ, so autocontrast acts),
``b`` 24 wide x 20 high RGB texture (non-square: catches width/height mix-ups; its
rotation by 90 degrees takes PIL's affine path, not the transpose), ``c`` 16x16 grayscale
(PIL mode "L").

Run from the repository root (needs torch, torchvision, pillow, numpy, safetensors):

    .venv/bin/python tools/make_augment_fixtures.py

The committed fixtures were made with torch 2.9.0, torchvision 0.24.0, Pillow 13.0.0,
numpy 2.4.6, safetensors 0.8.0 (Python 3.11, x86-64 Linux); the exact versions are also
stored in the file's ``index.versions``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import PIL
import safetensors
import torch
import torchvision
from PIL import Image
from safetensors.numpy import save_file
from torchvision.transforms import InterpolationMode
from torchvision.transforms.autoaugment import (
    AutoAugment,
    AutoAugmentPolicy,
    RandAugment,
    TrivialAugmentWide,
    _apply_op,
)

OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "crates", "vitlab", "tests", "fixtures", "augment"
)

# torchvision op name -> vitlab's config name
NAMES = {
    "Identity": "identity",
    "ShearX": "shear_x",
    "ShearY": "shear_y",
    "TranslateX": "translate_x",
    "TranslateY": "translate_y",
    "Rotate": "rotate",
    "Brightness": "brightness",
    "Color": "color",
    "Contrast": "contrast",
    "Sharpness": "sharpness",
    "Posterize": "posterize",
    "Solarize": "solarize",
    "AutoContrast": "autocontrast",
    "Equalize": "equalize",
    "Invert": "invert",
}
GEOMETRIC = ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"]
COLOUR = ["Brightness", "Color", "Contrast", "Sharpness"]


def make_images() -> dict[str, np.ndarray]:
    """Three deterministic test images, HWC uint8 (HW for grayscale)."""
    rng = np.random.default_rng(20240611)
    # a: 32x32 gradients with noise; each channel spans a different range.
    y, x = np.mgrid[0:32, 0:32].astype(np.float64)
    r = 30 + 190 * x / 31
    g = 50 + 150 * y / 31
    b = 128 + 100 * np.sin((x + y) / 7.0)
    a = np.stack([r, g, b], -1) + rng.normal(0, 12, (32, 32, 3))
    a = np.clip(np.round(a), 0, 255).astype(np.uint8)
    # b: 24 wide x 20 high texture: oriented stripes, two soft blobs, a hard edge, fine noise.
    y, x = np.mgrid[0:20, 0:24].astype(np.float64)
    stripes = 40 * np.sin(0.9 * x + 0.4 * y)
    blob1 = 90 * np.exp(-((x - 6) ** 2 + (y - 5) ** 2) / 18.0)
    blob2 = 70 * np.exp(-((x - 17) ** 2 + (y - 14) ** 2) / 30.0)
    edge = np.where(x + 0.5 * y > 16, 35.0, -25.0)
    base = 110 + stripes + blob1 - blob2 + edge
    b = np.stack([base + 20, 0.8 * base + 10 * np.cos(y), 255 - base], -1) + rng.normal(0, 9, (20, 24, 3))
    b = np.clip(np.round(b), 0, 255).astype(np.uint8)
    # c: 16x16 grayscale rings with noise.
    y, x = np.mgrid[0:16, 0:16].astype(np.float64)
    c = 120 + 80 * np.cos(np.hypot(x - 7.3, y - 8.1) / 1.7) + rng.normal(0, 15, (16, 16))
    c = np.clip(np.round(c), 0, 255).astype(np.uint8)
    return {"a": a, "b": b, "c": c}


def to_chw(img: Image.Image) -> np.ndarray:
    arr = np.asarray(img)
    # Copy at once: the array may share the PIL image's buffer.
    return (arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)).copy()


def plain(space) -> dict[str, list]:
    """A torchvision augmentation space as {op: bins}: float32 values as Python floats, [] for none."""
    return {NAMES[k]: [float(v) for v in m.reshape(-1).tolist()] if m.ndim > 0 else [] for k, (m, _) in space.items()}


def spaces(h: int, w: int) -> dict[str, dict[str, list]]:
    """torchvision's magnitude bins: AutoAugment's (10 bins), RandAugment's (31) and TrivialAugmentWide's."""
    return {
        "std10": plain(AutoAugment()._augmentation_space(10, (h, w))),
        "std31": plain(RandAugment()._augmentation_space(31, (h, w))),
        "wide31": plain(TrivialAugmentWide()._augmentation_space(31)),
    }


def op_cases(name: str, h: int, w: int, full: bool) -> list[tuple[str, float, str]]:
    """(op, signed magnitude, source) for one image: every op, both signs for signed ops."""
    sp = {k: {op: v[NAMES[op]] for op in NAMES if NAMES[op] in v} for k, v in spaces(h, w).items()}
    # The third pick is used on image a only (rotation by 135 degrees).
    picks = {
        "ShearX": [("std10", 7), ("wide31", 23)],
        "ShearY": [("std10", 7), ("wide31", 23)],
        "TranslateX": [("std10", 3), ("std31", 13)],
        "TranslateY": [("std10", 3), ("std31", 13)],
        "Rotate": [("std10", 5), ("wide31", 20), ("wide31", 30)],
        "Brightness": [("std10", 4), ("wide31", 30)],
        "Color": [("std10", 4), ("wide31", 30)],
        "Contrast": [("std10", 4), ("wide31", 30)],
        "Sharpness": [("std10", 4), ("wide31", 30)],
    }
    cases = []
    for op in GEOMETRIC + COLOUR:
        chosen = picks[op] if full else picks[op][:2]
        for space, i in chosen:
            m = sp[space][op][i]
            for sign in (1.0, -1.0):
                cases.append((op, sign * m, f"{space}[{i}]{'' if sign > 0 else ' negated'}"))
    for space, i in [("std10", 4), ("std10", 9), ("wide31", 30)]:
        cases.append(("Posterize", sp[space]["Posterize"][i], f"{space}[{i}]"))
    for space, i in [("std10", 2), ("std10", 5), ("std31", 30)]:
        cases.append(("Solarize", sp[space]["Solarize"][i], f"{space}[{i}]"))
    for op in ["AutoContrast", "Equalize", "Invert", "Identity"]:
        cases.append((op, 0.0, "none"))
    return cases


def policy_cases() -> list[tuple[str, int, list[float], list[int]]]:
    """AutoAugment sub-policies with fixed (probs, signs): covers skip / apply / both signs."""
    return [
        ("cifar10", 1, [0.1, 0.2], [0, 1]),  # Rotate(0.7, 2) negated, TranslateX(0.3, 9)
        ("cifar10", 3, [0.5, 0.7], [1, 0]),  # ShearY(0.5, 8), TranslateY(0.7, 9) negated (p == prob applies)
        ("cifar10", 6, [0.3, 0.9], [0, 0]),  # Color negated, Brightness skipped
        ("cifar10", 9, [0.05, 0.3], [0, 1]),  # Contrast negated, Sharpness
        ("cifar10", 18, [0.2, 0.1], [1, 1]),  # AutoContrast, Solarize(0.2, 8)
        ("imagenet", 0, [0.3, 0.5], [1, 0]),  # Posterize(0.4, 8), Rotate(0.6, 9) negated
        ("imagenet", 14, [0.5, 0.9], [0, 1]),  # Color negated, Contrast
        ("svhn", 0, [0.8, 0.1], [0, 0]),  # ShearX(0.9, 4) negated, Invert
        ("svhn", 22, [0.6, 0.75], [1, 1]),  # ShearX(0.7, 9), TranslateY(0.8, 3)
    ]


def run_policy(img: Image.Image, policy: str, sub: int, probs: list[float], signs: list[int]) -> Image.Image:
    aa = AutoAugment(AutoAugmentPolicy(policy))
    aa.get_params = lambda n: (sub, torch.tensor(probs), torch.tensor(signs))
    return aa(img)


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    images = make_images()
    tensors: dict[str, np.ndarray] = {}
    index: dict = {"cases": [], "policy_cases": [], "spaces": {}}
    for key, arr in images.items():
        pil = Image.fromarray(arr, "L" if arr.ndim == 2 else "RGB")
        tensors[f"input/{key}"] = to_chw(pil)
        w, h = pil.size
        if key != "c":
            for name, space in spaces(h, w).items():
                index["spaces"][name if name.startswith("wide") else f"{name}/{h}x{w}"] = space
        outs = []
        for op, mag, source in op_cases(key, h, w, full=(key == "a")):
            out = _apply_op(pil, op, mag, interpolation=InterpolationMode.NEAREST, fill=None)
            index["cases"].append(
                {"image": key, "index": len(outs), "op": NAMES[op], "magnitude": mag, "source": source}
            )
            outs.append(to_chw(out))
        tensors[f"output/{key}"] = np.stack(outs)
        if key == "b":
            pouts = []
            for policy, sub, probs, signs in policy_cases():
                pouts.append(to_chw(run_policy(pil, policy, sub, probs, signs)))
                index["policy_cases"].append(
                    {"image": key, "index": len(pouts) - 1, "policy": policy, "sub": sub, "probs": probs, "signs": signs}
                )
            tensors[f"policy/{key}"] = np.stack(pouts)
    index["spaces"]["wide10"] = plain(TrivialAugmentWide()._augmentation_space(10))
    index["policies"] = {
        p.value: [[[NAMES[o], pr, m] for (o, pr, m) in sub] for sub in AutoAugment(p).policies]
        for p in AutoAugmentPolicy
    }
    index["randaugment_ops"] = [NAMES[k] for k in RandAugment()._augmentation_space(31, (32, 32))]
    index["trivialaugment_ops"] = [NAMES[k] for k in TrivialAugmentWide()._augmentation_space(31)]
    index["versions"] = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "safetensors": safetensors.__version__,
        "python": sys.version.split()[0],
    }
    path = os.path.join(OUT, "augment.safetensors")
    save_file(tensors, path, metadata={"index": json.dumps(index, separators=(",", ":"))})
    os.chmod(path, 0o644)
    n = len(index["cases"])
    print(f"wrote {path}: {n} op cases, {len(index['policy_cases'])} policy cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
