#!/usr/bin/env python3
"""Golden fixtures for vitlab's optimisers (crates/vitlab/src/train/optim.rs)
from ``torch.optim``: AdamW, Adam with L2 weight decay, SGD with momentum
(plain and Nesterov).

Each case trains a small toy module whose parameters have vitlab's key layout
(``pos_embed``, ``blocks.<i>.weight``/``.bias``, ``head.weight``/``.bias``) for
a few steps with given gradients, a learning rate that changes every step (as a
schedule does) and a gradient scale per step (as gradient clipping multiplies
the gradients before the step). vitlab's per-parameter options map to one
PyTorch parameter group per tensor:

* ``skip_decay_1d``: weight decay 0 for 1-D tensors and ``pos_embed``;
* ``layer_decay`` d with ``depth`` blocks (BEiT's layer ids, as
  ``Optimizer::lr_scale``): ``pos_embed`` trains at ``lr * d^(depth+1)``,
  block i at ``lr * d^(depth-i)``, the head at ``lr``.

File ``crates/vitlab/tests/fixtures/optim.safetensors``:

* ``<case>.init.<key>``: the parameters before the first step;
* ``<case>.grad<s>.<key>``: the gradient of step s (before the scale);
* ``<case>.param<s>.<key>``: the parameters after step s;
* ``<case>.m.<key>`` / ``<case>.v.<key>``: the optimiser state after the last
  step (AdamW/Adam ``exp_avg`` / ``exp_avg_sq``, SGD ``momentum_buffer`` as m),
  flattened as vitlab's checkpoints store it;
* metadata ``config``: per case the optimiser settings, ``lr`` and ``scale`` per step.

Run (CPU only): ``.venv/bin/python tools/make_optim_fixtures.py`` with torch 2.9.0
(the committed file was made with torch 2.9.0+cu128, Python 3.11). The toy
gradients have magnitudes from 1e-4 to 10, so that Adam's normalisation and its
eps both matter.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import save_safetensors  # noqa: E402

DEPTH = 2
STEPS = 6
SHAPES = {"pos_embed": (1, 3, 4)}
for i in range(DEPTH):
    SHAPES[f"blocks.{i}.weight"] = (4, 5)
    SHAPES[f"blocks.{i}.bias"] = (5,)
SHAPES["head.weight"] = (5, 3)
SHAPES["head.bias"] = (3,)

CASES = {
    # Lee et al.'s recipe (configs/strong-cifar10.toml) plus layer decay.
    "adamw": dict(name="adamw", weight_decay=0.05, betas=[0.9, 0.999], eps=1e-8, momentum=0.0, nesterov=False,
                  skip_decay_1d=True, layer_decay=0.75),
    # CycleGAN's Adam (betas 0.5, 0.999) with an L2 term.
    "adam": dict(name="adam", weight_decay=1e-3, betas=[0.5, 0.999], eps=1e-8, momentum=0.0, nesterov=False,
                 skip_decay_1d=False, layer_decay=1.0),
    "sgd": dict(name="sgd", weight_decay=5e-4, betas=[0.9, 0.999], eps=1e-8, momentum=0.9, nesterov=False,
                skip_decay_1d=True, layer_decay=1.0),
    "sgd_nesterov": dict(name="sgd", weight_decay=5e-4, betas=[0.9, 0.999], eps=1e-8, momentum=0.9, nesterov=True,
                         skip_decay_1d=False, layer_decay=0.5),
}
LRS = [1e-3, 2e-3, 1.5e-3, 8e-4, 5e-4, 2e-4]
SCALES = [1.0, 0.5, 1.0, 0.25, 1.0, 0.8]


def lr_scale(key: str, layer_decay: float) -> float:
    top = DEPTH + 1
    if key.startswith("blocks."):
        layer = int(key.split(".")[1]) + 1
    elif key.startswith("pos_embed"):
        layer = 0
    else:
        layer = top
    return layer_decay ** (top - layer)


def decays(key: str, shape: tuple, skip_1d: bool) -> bool:
    return not (skip_1d and (len(shape) == 1 or key == "pos_embed"))


def run_case(case: str, c: dict, gen: torch.Generator) -> dict:
    out = {}
    params = {}
    for key, shape in SHAPES.items():
        p = torch.randn(shape, generator=gen)
        out[f"{case}.init.{key}"] = p.clone()
        params[key] = torch.nn.Parameter(p)
    groups = [
        dict(params=[params[k]], lr=LRS[0] * lr_scale(k, c["layer_decay"]),
             weight_decay=c["weight_decay"] if decays(k, s, c["skip_decay_1d"]) else 0.0, key=k)
        for k, s in SHAPES.items()
    ]
    if c["name"] == "adamw":
        opt = torch.optim.AdamW(groups, betas=tuple(c["betas"]), eps=c["eps"])
    elif c["name"] == "adam":
        opt = torch.optim.Adam(groups, betas=tuple(c["betas"]), eps=c["eps"])
    else:
        opt = torch.optim.SGD(groups, lr=LRS[0], momentum=c["momentum"], nesterov=c["nesterov"])
    for s in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = LRS[s] * lr_scale(g["key"], c["layer_decay"])
        for key, p in params.items():
            # Magnitudes from 1e-4 to 10 across tensors and steps.
            mag = 10.0 ** torch.empty(()).uniform_(-4, 1, generator=gen)
            g = torch.randn(p.shape, generator=gen) * mag
            out[f"{case}.grad{s}.{key}"] = g.clone()
            p.grad = g * SCALES[s]
        opt.step()
        for key, p in params.items():
            out[f"{case}.param{s}.{key}"] = p.detach().clone()
    for key, p in params.items():
        st = opt.state[p]
        if c["name"] == "sgd":
            out[f"{case}.m.{key}"] = st["momentum_buffer"].reshape(-1).clone()
        else:
            out[f"{case}.m.{key}"] = st["exp_avg"].reshape(-1).clone()
            out[f"{case}.v.{key}"] = st["exp_avg_sq"].reshape(-1).clone()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="crates/vitlab/tests/fixtures")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(20261206)
    tensors = {}
    config = {"depth": DEPTH, "steps": STEPS, "lr": LRS, "scale": SCALES, "cases": {}}
    for case, c in CASES.items():
        tensors.update(run_case(case, c, gen))
        config["cases"][case] = c
    path = os.path.join(args.out, "optim.safetensors")
    save_safetensors(tensors, path, {"config": json.dumps(config, sort_keys=True), "torch": torch.__version__})
    print(f"wrote {path}: {len(tensors)} tensors, torch {torch.__version__}")


if __name__ == "__main__":
    main()
