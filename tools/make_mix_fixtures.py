#!/usr/bin/env python3
"""Golden fixtures for `crates/vitlab/src/data/mix.rs` (Mixup/CutMix, random
erasing, repeated augmentation, soft-target cross-entropy).

Writes small JSON files to ``crates/vitlab/tests/fixtures/mix/``; the tests in
mix.rs (``cargo test -p vitlab --lib data::mix``) replay them.

Every random draw the reference code makes is *scripted and recorded*: numpy's
``np.random.rand/beta/randint`` (timm's Mixup), Python's ``random`` module
(timm's RandomErasing) and torch's ``normal_`` (the fill of the 'rand'/'pixel'
erasing modes) are replaced by recorders that draw from a seeded generator (or
take a value forced by the case) and log the value. The JSON stores the log as
``draws``: ``["unit", u]`` a uniform [0, 1), ``["beta", x]`` a Beta draw,
``["below", k, n]`` an integer in [0, n) (``randint(lo, hi)`` is logged as
``lo + k``), ``["normal", x]`` a standard normal, ``["perm", [...]]`` a
permutation. mix.rs draws through the same small interface, so a test feeds it
the log and must reproduce the reference output bit for bit.

References (semantics, read for the Rust side; no code of theirs is in mix.rs):
- timm ``timm/data/mixup.py`` (Mixup, mixup_target, rand_bbox, rand_bbox_minmax,
  cutmix_bbox_and_lam) and ``timm/data/random_erasing.py``, called directly.
- Lee, Lee & Song 2021, "Vision Transformer for Small-Size Datasets",
  github.com/aanna0701/SPT_LSA_ViT: ``utils/mix.py`` (rand_bbox, mixup_data,
  cutmix_data, mixup_criterion), ``utils/random_erasing.py``, ``utils/losses.py``
  and the mix choice of ``main.py``'s train loop. That code is not on PyPI (and
  its ``np.int`` no longer runs on numpy >= 1.24), so this script restates it
  (``lee_*`` below); ``--lee-repo PATH`` imports the real files from a checkout
  and asserts that the restatement gives the same outputs.
- DeiT ``samplers.py`` (github.com/facebookresearch/deit, RASampler with
  ``num_repeats``): the layout is restated in ``deit_ra_layout``;
  ``--deit-repo PATH`` checks it against the real class (its permutation is
  ``torch.randperm(n, generator=manual_seed(epoch))``, recorded here).

Run (any machine, CPU only):

    python3 -m venv /tmp/mixvenv && /tmp/mixvenv/bin/pip install torch==2.9.0 torchvision==0.24.0 timm numpy
    /tmp/mixvenv/bin/python tools/make_mix_fixtures.py [--lee-repo DIR] [--deit-repo DIR]

The committed fixtures were made with torch 2.9.0, timm 1.0.31, numpy 2.4.6,
Python 3.11.7, cross-checked with --lee-repo (SPT_LSA_ViT @ 54bd796) and
--deit-repo (deit @ 7e160fe). Note timm 1.0.31's ``rand_bbox`` ends the box at
``c + (cut + 1) // 2`` (older timm and CutMix-PyTorch/Lee et al. use
``c + cut // 2``), and its ``rand_bbox_minmax`` draws the corner from
``randint(0, size - cut + 1)``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import sys
import types

import numpy as np
import torch

import timm
import timm.data.mixup as tmix
import timm.data.random_erasing as terase
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "vitlab", "tests", "fixtures", "mix")


def f32list(t) -> list:
    a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return [float(v) for v in a.astype(np.float32).reshape(-1)]


def batch(n, c, h, w, seed):
    # multiples of 1/32 in [-3, 3]: exact in f32 and short in JSON
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-96, 97, (n, c, h, w), generator=g).float() / 32


# ---------------------------------------------------------------- recorders --

class NumpyScript:
    """Stands in for np.random.{rand, beta, randint} while active; `forced` maps
    a draw's position in the log to the value it must take."""

    def __init__(self, seed, forced=None):
        self.g = np.random.default_rng(seed)
        self.forced = dict(forced or {})
        self.draws = []
        self.saved = None

    def _next(self, default):
        i = len(self.draws)
        return self.forced.pop(i) if i in self.forced else default()

    def rand(self, *size):
        assert not size
        u = float(self._next(lambda: self.g.random()))
        self.draws.append(["unit", u])
        return u

    def beta(self, a, b, size=None):
        assert size is None
        x = float(self._next(lambda: self.g.beta(a, b)))
        self.draws.append(["beta", x])
        return x

    def randint(self, low, high=None, size=None):
        assert size is None
        if high is None:
            low, high = 0, low
        low, high = int(low), int(high)
        n = high - low
        if n <= 0:
            raise ValueError("low >= high")
        k = int(self._next(lambda: self.g.integers(0, n)))
        assert 0 <= k < n
        self.draws.append(["below", k, n])
        return np.int64(low + k)

    def perm(self, n):
        p = [int(v) for v in self._next(lambda: self.g.permutation(n))]
        self.draws.append(["perm", p])
        return p

    def __enter__(self):
        self.saved = (np.random.rand, np.random.beta, np.random.randint)
        np.random.rand, np.random.beta, np.random.randint = self.rand, self.beta, self.randint
        return self

    def __exit__(self, *exc):
        np.random.rand, np.random.beta, np.random.randint = self.saved


class PyRandomScript:
    """Stands in for the `random` module inside timm.data.random_erasing:
    random(), uniform(a, b) = a + (b - a) * random() (CPython's formula) and
    randint(a, b) inclusive. torch normals drawn by _get_pixels are logged too."""

    def __init__(self, seed, forced=None):
        self.g = random.Random(seed)
        self.forced = dict(forced or {})
        self.draws = []

    def _next(self, default):
        i = len(self.draws)
        return self.forced.pop(i) if i in self.forced else default()

    def random(self):
        u = float(self._next(self.g.random))
        self.draws.append(["unit", u])
        return u

    def uniform(self, a, b):
        return a + (b - a) * self.random()

    def randint(self, a, b):
        n = b - a + 1
        k = int(self._next(lambda: self.g.randrange(n)))
        assert 0 <= k < n
        self.draws.append(["below", k, n])
        return a + k

    def __enter__(self):
        self.saved = (terase.random, terase._get_pixels)
        orig = terase._get_pixels

        def get_pixels(*args, **kwargs):
            t = orig(*args, **kwargs)
            # 'const' draws nothing; 'rand' draws chan normals, 'pixel' chan*h*w
            if args[0] or args[1]:
                self.draws.extend(["normal", float(v)] for v in t.reshape(-1).tolist())
            return t

        terase.random = self
        terase._get_pixels = get_pixels
        return self

    def __exit__(self, *exc):
        terase.random, terase._get_pixels = self.saved


# ------------------------------------------------ Lee et al. 2021, restated --

def lee_rand_bbox(size, lam, rs):
    # utils/mix.py rand_bbox: size is NCHW, their "W" is size[2] (rows) and
    # their "H" size[3] (columns); the box slices x[:, :, b1:b2, b1':b2'].
    rows, cols = size[2], size[3]
    cut_rat = np.sqrt(1.0 - lam)
    cut_r, cut_c = int(rows * cut_rat), int(cols * cut_rat)
    cr, cc = rs.randint(rows), rs.randint(cols)
    return (int(np.clip(cr - cut_r // 2, 0, rows)), int(np.clip(cc - cut_c // 2, 0, cols)),
            int(np.clip(cr + cut_r // 2, 0, rows)), int(np.clip(cc + cut_c // 2, 0, cols)))


def lee_step(x, y, cm, mu, alpha, beta, mix_prob, rs):
    """One batch of main.py's train loop up to the loss: returns the mixed batch,
    (y_a, y_b, lam) or None when nothing was mixed, and the box for cutmix."""
    x = x.clone()
    if not (cm or mu) or rs.rand() >= mix_prob:
        return x, None, None
    use_cm = cm and (not mu or rs.rand() < 0.5)
    if use_cm:
        lam = rs.beta(beta, beta) if beta > 0 else 1
        index = torch.tensor(rs.perm(x.shape[0]))
        y_a, y_b = y, y[index]
        b = lee_rand_bbox(x.shape, lam, rs)
        sliced = x[index, :, b[0]:b[2], b[1]:b[3]]
        lam = 1 - ((b[2] - b[0]) * (b[3] - b[1]) / (x.size()[-1] * x.size()[-2]))
        x[:, :, b[0]:b[2], b[1]:b[3]] = sliced
        return x, (y_a, y_b, lam), b
    lam = rs.beta(alpha, alpha) if alpha > 0 else 1
    index = torch.tensor(rs.perm(x.shape[0]))
    return lam * x + (1 - lam) * x[index, :], (y, y[index], lam), None


def lee_random_erasing(img, probability, sl, sh, r1, mean, rs):
    # utils/random_erasing.py: 100 attempts, aspect uniform in [r1, 1/r1]
    # (not log-uniform), fill with `mean` (applied after Normalize in main.py).
    if rs.uniform(0, 1) > probability:
        return img, None
    for _ in range(100):
        area = img.size()[1] * img.size()[2]
        target_area = rs.uniform(sl, sh) * area
        aspect_ratio = rs.uniform(r1, 1 / r1)
        h = int(round(math.sqrt(target_area * aspect_ratio)))
        w = int(round(math.sqrt(target_area / aspect_ratio)))
        if w < img.size()[2] and h < img.size()[1]:
            x1 = rs.randint(0, img.size()[1] - h)
            y1 = rs.randint(0, img.size()[2] - w)
            if img.size()[0] == 3:
                for ch in range(3):
                    img[ch, x1:x1 + h, y1:y1 + w] = mean[ch]
            else:
                img[0, x1:x1 + h, y1:y1 + w] = mean[1]
            return img, (x1, x1 + h, y1, y1 + w)
    return img, None


def deit_ra_layout(perm, num_repeats, num_replicas, rank):
    # DeiT samplers.py RASampler.__iter__ after the permutation.
    n = len(perm)
    num_samples = int(math.ceil(n * num_repeats / num_replicas))
    total_size = num_samples * num_replicas
    num_selected = int(math.floor(n // 256 * 256 / num_replicas))
    idx = [int(e) for e in perm for _ in range(num_repeats)]
    pad = total_size - len(idx)
    if pad > 0:
        idx += idx[:pad]
    assert len(idx) == total_size
    idx = idx[rank:total_size:num_replicas]
    assert len(idx) == num_samples
    return idx[:num_selected]


def load_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------- cases --

def bbox_cases():
    cases = []
    specs = [
        # (h, w, lam, minmax, correct_lam, seed)
        (32, 32, 0.5, None, True, 1),
        (32, 32, 0.1, None, True, 2),
        (32, 32, 0.93, None, True, 3),
        (32, 32, 0.999, None, True, 4),  # cut 1 pixel: odd-size box
        (7, 11, 0.37, None, True, 5),
        (7, 11, 0.37, None, False, 5),
        (224, 224, 0.25, None, True, 6),
        (224, 160, 0.6, None, False, 7),
        (32, 32, 0.5, (0.2, 0.8), True, 8),
        (9, 13, 0.5, (0.3, 0.9), False, 9),
    ]
    for h, w, lam, minmax, correct, seed in specs:
        for forced in ({}, {0: 0, 1: 0}, {0: h - 1, 1: w - 1}) if minmax is None else ({},):
            with NumpyScript(seed, forced) as rs:
                (yl, yh, xl, xh), lam_out = tmix.cutmix_bbox_and_lam((3, h, w), lam, ratio_minmax=minmax, correct_lam=correct)
            cases.append(dict(rule="timm", h=h, w=w, lam=lam, minmax=minmax, correct_lam=correct, draws=rs.draws,
                              bbox=[int(yl), int(yh), int(xl), int(xh)], lam_out=float(lam_out)))
        if minmax is None:
            with NumpyScript(seed) as rs:
                b = lee_rand_bbox((2, 3, h, w), lam, rs)
            lam_out = 1 - ((b[2] - b[0]) * (b[3] - b[1]) / (w * h)) if correct else lam
            cases.append(dict(rule="symmetric", h=h, w=w, lam=lam, minmax=None, correct_lam=correct, draws=rs.draws,
                              bbox=[b[0], b[2], b[1], b[3]], lam_out=float(lam_out)))
    return cases


def target_cases():
    cases = []
    for labels, k, lam, s in [([0, 3, 1, 2], 5, 0.7, 0.1), ([9, 9, 0], 10, 0.123456789, 0.0), ([4, 1, 0, 2, 3, 1], 5, 1.0, 0.1),
                              ([1, 0], 3, 0.5, 0.2), ([7, 2, 5, 0, 1], 8, 0.31831, 0.1)]:
        t = tmix.mixup_target(torch.tensor(labels), k, lam, s)
        cases.append(dict(labels=labels, num_classes=k, lam=lam, smoothing=s, target=f32list(t)))
    return cases


def mix_batch_cases():
    """timm Mixup(mode='batch').__call__ end to end, plus odd batches through
    _mix_batch + mixup_target (timm's __call__ asserts an even batch)."""
    cases = []
    specs = [
        # name, kwargs, (n, c, h, w), seed, forced draws, odd
        ("mixup", dict(mixup_alpha=0.8, cutmix_alpha=0.0), (4, 2, 5, 7), 11, {}, False),
        ("cutmix", dict(mixup_alpha=0.0, cutmix_alpha=1.0), (4, 2, 6, 8), 12, {}, False),
        ("switch_to_cutmix", dict(mixup_alpha=0.8, cutmix_alpha=1.0), (6, 2, 6, 6), 13, {1: 0.1}, False),
        ("switch_to_mixup", dict(mixup_alpha=0.8, cutmix_alpha=1.0), (6, 2, 6, 6), 14, {1: 0.9}, False),
        ("no_mix_prob", dict(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.5), (4, 1, 4, 4), 15, {0: 0.7}, False),
        ("cutmix_uncorrected", dict(mixup_alpha=0.0, cutmix_alpha=1.0, correct_lam=False), (4, 2, 9, 9), 16, {1: 0.3, 2: 8, 3: 0}, False),
        ("cutmix_minmax", dict(mixup_alpha=0.8, cutmix_alpha=0.0, cutmix_minmax=(0.2, 0.8)), (4, 2, 10, 12), 17, {1: 0.1}, False),
        ("mixup_odd", dict(mixup_alpha=0.8, cutmix_alpha=0.0), (5, 2, 4, 6), 18, {}, True),
        ("cutmix_odd", dict(mixup_alpha=0.0, cutmix_alpha=1.0), (5, 2, 8, 8), 19, {1: 0.4}, True),
    ]
    for name, kw, shape, seed, forced, odd in specs:
        kw = dict(dict(prob=1.0, switch_prob=0.5, correct_lam=True, label_smoothing=0.1, num_classes=10, cutmix_minmax=None), **kw)
        m = tmix.Mixup(**kw)
        x = batch(*shape, seed)
        y = torch.tensor([(3 * i + seed) % kw["num_classes"] for i in range(shape[0])])
        boxes, lams = [], []
        orig_cbl, orig_mb = tmix.cutmix_bbox_and_lam, m._mix_batch

        def cbl(*a, **k):
            r = orig_cbl(*a, **k)
            boxes.append([int(v) for v in r[0]])
            return r

        def mb(xb):
            lams.append(float(orig_mb(xb)))  # the lam timm used: 1 when not mixed, else the (corrected) value
            return lams[-1]

        tmix.cutmix_bbox_and_lam, m._mix_batch = cbl, mb
        try:
            with NumpyScript(seed, forced) as rs:
                xo = x.clone()
                if odd:
                    lam = m._mix_batch(xo)
                    t = tmix.mixup_target(y, m.num_classes, lam, m.label_smoothing)
                else:
                    xo, t = m(xo, y)
        finally:
            tmix.cutmix_bbox_and_lam = orig_cbl
        lam = lams[0]
        kind = "cutmix" if boxes else ("none" if lam == 1.0 else "mixup")
        cases.append(dict(name=name, config=kw, shape=list(shape), labels=y.tolist(), input=f32list(x), draws=rs.draws,
                          output=f32list(xo), target=f32list(t), lam=lam, kind=kind, bbox=boxes[0] if boxes else None))
    return cases


def lee_mix_cases(lee_mix_mod):
    cases = []
    specs = [
        # name, (cm, mu), (n, c, h, w), seed, forced
        ("lee_cutmix", (True, True), (6, 2, 6, 6), 21, {0: 0.1, 1: 0.2}),
        ("lee_mixup", (True, True), (6, 2, 6, 6), 22, {1: 0.8}),
        ("lee_cutmix_only", (True, False), (5, 2, 7, 9), 23, {0: 0.3}),
        ("lee_no_mix", (True, True), (4, 2, 4, 4), 24, {0: 0.6}),
    ]
    for name, (cm, mu), shape, seed, forced in specs:
        k, s = 10, 0.1
        x = batch(*shape, seed)
        y = torch.tensor([(5 * i + seed) % k for i in range(shape[0])])
        logits = torch.randn(shape[0], k, generator=torch.Generator().manual_seed(seed + 1000))
        with NumpyScript(seed, forced) as rs:
            xo, mixed, b = lee_step(x, y, cm, mu, 1.0, 1.0, 0.5, rs)
        crit = LabelSmoothingCrossEntropy(s)
        if mixed is None:
            loss, lam, perm, kind = crit(logits, y), 1.0, None, "none"
        else:
            y_a, y_b, lam = mixed
            loss = lam * crit(logits, y_a) + (1 - lam) * crit(logits, y_b)  # their mixup_criterion
            perm = [d[1] for d in rs.draws if d[0] == "perm"][0]
            kind = "cutmix" if b is not None else "mixup"
        if lee_mix_mod is not None and mixed is not None:
            # the same draws through their own functions
            args = types.SimpleNamespace(alpha=1.0, beta=1.0)
            replay = [d for d in rs.draws if d[0] != "unit"]
            real = NumpyScript(0, {i: d[1] for i, d in enumerate(replay)})
            saved = (torch.randperm, torch.Tensor.cuda)
            torch.randperm = lambda n, *a, **kw: torch.tensor(real.perm(n))
            torch.Tensor.cuda = lambda self, *a, **kw: self
            try:
                with real:
                    if kind == "cutmix":
                        xr = x.clone()
                        idx, ya, yb, lam_r, sliced = lee_mix_mod.cutmix_data(xr, y, args)
                        xr[:, :, idx[0]:idx[2], idx[1]:idx[3]] = sliced
                    else:
                        xr, ya, yb, lam_r = lee_mix_mod.mixup_data(x.clone(), y, args)
            finally:
                torch.randperm, torch.Tensor.cuda = saved
            assert torch.equal(xr, xo) and lam_r == lam and torch.equal(yb, y_b), name
        cases.append(dict(name=name, cutmix=cm, mixup=mu, shape=list(shape), labels=y.tolist(), num_classes=k, smoothing=s,
                          input=f32list(x), draws=rs.draws, output=f32list(xo), lam=float(lam), kind=kind, partners=perm,
                          bbox=[b[0], b[2], b[1], b[3]] if b is not None else None, logits=f32list(logits), loss=float(loss)))
    return cases


def erase_cases(lee_re_mod):
    cases = []
    specs = [
        # name, kwargs, (c, h, w), seed, forced
        ("const", dict(probability=1.0, mode="const"), (3, 12, 12), 31, {}),
        ("rand", dict(probability=1.0, mode="rand"), (3, 10, 12), 32, {}),
        ("pixel", dict(probability=1.0, mode="pixel"), (3, 10, 8), 33, {}),
        ("pixel_count3", dict(probability=1.0, mode="pixel", min_count=1, max_count=3), (2, 16, 16), 34, {1: 2}),
        ("retries", dict(probability=1.0, mode="const", max_area=0.9, min_aspect=0.1), (1, 8, 8), 35, {}),
        ("skipped", dict(probability=0.25, mode="pixel"), (3, 8, 8), 36, {0: 0.5}),
        ("small_const", dict(probability=0.5, mode="const", max_area=0.4), (3, 5, 7), 37, {0: 0.1}),
        # target area 6.25 px, aspect 1: sqrt = 2.5 exactly, which Python's round() takes to 2 (half to even)
        ("round_half_even", dict(probability=1.0, mode="const", min_area=6.25 / 256, max_area=6.25 / 256, min_aspect=1.0), (2, 16, 16), 38, {}),
    ]
    for name, kw, shape, seed, forced in specs:
        kw = dict(dict(min_area=0.02, max_area=1 / 3, min_aspect=0.3, min_count=1, max_count=None, device="cpu"), **kw)
        img = batch(1, *shape, seed)[0]
        out = img.clone()
        torch.manual_seed(seed)
        with PyRandomScript(seed, forced) as rs:
            terase.RandomErasing(**kw)(out)
        kw.pop("device")
        cases.append(dict(name=name, variant="timm", config=kw, shape=list(shape), input=f32list(img), draws=rs.draws,
                          output=f32list(out)))
    mean = [0.4914, 0.4822, 0.4465]
    for name, shape, seed, forced in [("lee", (3, 16, 16), 41, {}), ("lee_gray", (1, 16, 16), 42, {}),
                                      ("lee_skipped", (3, 8, 8), 43, {0: 0.9})]:
        img = batch(1, *shape, seed)[0]
        rs = PyRandomScript(seed, forced)
        out, _ = lee_random_erasing(img.clone(), 0.25 if name == "lee_skipped" else 1.0, 0.02, 0.4, 0.3, mean, rs)
        if lee_re_mod is not None:
            real = PyRandomScript(0, {i: d[1] for i, d in enumerate(rs.draws)})
            saved = lee_re_mod.random
            lee_re_mod.random = real
            try:
                out_r = lee_re_mod.RandomErasing(probability=0.25 if name == "lee_skipped" else 1.0, sh=0.4, r1=0.3, mean=mean)(img.clone())
            finally:
                lee_re_mod.random = saved
            assert torch.equal(out_r, out) and real.draws == rs.draws, name
        fill = mean if shape[0] == 3 else [mean[1]]
        cases.append(dict(name=name, variant="lee", config=dict(probability=0.25 if name == "lee_skipped" else 1.0, min_area=0.02,
                          max_area=0.4, min_aspect=0.3, value=fill), shape=list(shape), input=f32list(img), draws=rs.draws,
                          output=f32list(out)))
    return cases


def ra_cases(deit_mod):
    cases = []
    for n, reps, replicas, epoch in [(600, 3, 1, 0), (600, 3, 2, 1), (600, 3, 3, 2), (1001, 3, 4, 3), (515, 2, 3, 4), (300, 1, 1, 5), (100, 3, 1, 6)]:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(epoch)).tolist()
        orders = []
        for rank in range(replicas):
            order = deit_ra_layout(perm, reps, replicas, rank)
            orders.append(order)
            if deit_mod is not None:
                class DS:
                    def __len__(self):
                        return n
                s = deit_mod.RASampler(DS(), num_replicas=replicas, rank=rank, shuffle=True, num_repeats=reps)
                s.set_epoch(epoch)
                assert list(iter(s)) == order and len(s) == len(order)
        cases.append(dict(n=n, num_repeats=reps, num_replicas=replicas, perm=perm, orders=orders))
    return cases


def soft_ce_cases():
    cases = []
    for n, k, seed in [(4, 5, 51), (3, 10, 52), (6, 37, 53)]:
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(n, k, generator=g) * 4
        t = torch.rand(n, k, generator=g)
        t = t / t.sum(-1, keepdim=True)
        cases.append(dict(n=n, k=k, logits=f32list(logits), targets=f32list(t), loss=float(SoftTargetCrossEntropy()(logits, t))))
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lee-repo", help="checkout of aanna0701/SPT_LSA_ViT: check the restated Lee et al. code against it")
    ap.add_argument("--deit-repo", help="checkout of facebookresearch/deit: check the restated RASampler against it")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    lee_mix = lee_re = deit = None
    if a.lee_repo:
        if not hasattr(np, "int"):
            np.int = int  # their rand_bbox uses np.int, removed in numpy 1.24
        lee_mix = load_file(os.path.join(a.lee_repo, "utils", "mix.py"), "lee_mix")
        lee_re = load_file(os.path.join(a.lee_repo, "utils", "random_erasing.py"), "lee_random_erasing")
    if a.deit_repo:
        deit = load_file(os.path.join(a.deit_repo, "samplers.py"), "deit_samplers")
    os.makedirs(a.out, exist_ok=True)
    versions = dict(torch=torch.__version__, timm=timm.__version__, numpy=np.__version__, python=sys.version.split()[0],
                    lee_checked=bool(a.lee_repo), deit_checked=bool(a.deit_repo))
    files = {
        "bbox.json": bbox_cases(),
        "mixup_target.json": target_cases(),
        "mix_batch.json": mix_batch_cases(),
        "lee_mix.json": lee_mix_cases(lee_mix),
        "erase.json": erase_cases(lee_re),
        "ra.json": ra_cases(deit),
        "soft_ce.json": soft_ce_cases(),
    }
    for name, cases in files.items():
        with open(os.path.join(a.out, name), "w") as f:
            json.dump(dict(made_with=versions, cases=cases), f, separators=(",", ":"))
            f.write("\n")
        print(f"{name}: {len(cases)} cases")


if __name__ == "__main__":
    main()
