#!/usr/bin/env python3
"""The PyTorch side of `vitlab bench --against-pytorch`: one measurement per process.

Times training steps (forward, cross-entropy, backward, AdamW step) or
inference batches of the same model vitlab benchmarks, written the way a
PyTorch user would: the plain ViT is timm's ``VisionTransformer`` (fused
``scaled_dot_product_attention``), the ViT-22B variants are the reference
modules of ``tools/make_fixtures.py``. Eager mode (``--compile``: ``torch.compile``, inductor),
fp32 (``--precision bf16``: forward and loss under ``torch.autocast(dtype=torch.bfloat16)``,
as vitlab's ``precision = "bf16"``), all CPU threads or ``--device cuda``. ``--model inception-fid``
is pytorch-fid's feature extraction (InceptionV3, 2048-d pool, inputs resized to 299);
``--model vitunet-SIZE`` / ``vit22bunet-SIZE`` one CycleGAN iteration (``cyclegan_step_fn``).

Prints one JSON line: {"stack", "mode", "batch", "step_ms", "peak_rss_kib", "base_rss_kib"}
(``stack``: ``pytorch``, or ``pytorch-compile`` with ``--compile``; on CUDA the peak is
``torch.cuda.max_memory_allocated``'s, in KiB, and the base 0).

    python3 tools/bench_pytorch.py --model vit-tiny --image-size 32 --patch-size 4 --batch 128 --mode train
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SIZES, Discriminator, ViT, ViTUnet  # noqa: E402  (the reference implementation of docs/MODELS.md)


def peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def build(block: str, size: str, image_size: int, patch_size: int, num_classes: int):
    depth, dim, mlp, heads = SIZES[size]
    if block == "vit":
        from timm.models.vision_transformer import VisionTransformer

        return VisionTransformer(img_size=image_size, patch_size=patch_size, embed_dim=dim, depth=depth,
                                 num_heads=heads, mlp_ratio=mlp / dim, num_classes=num_classes)
    return ViT(block, image_size, patch_size, 3, num_classes, depth, dim, mlp, heads)


def build_inception_fid():
    """pytorch-fid 0.3.0's InceptionV3 at its 2048-d pool, as ``python -m pytorch_fid``
    builds it, but with a fresh initialisation instead of the downloaded weights (speed
    does not depend on their values; nothing is downloaded)."""
    import pytorch_fid.inception as pfi
    from convert_fid_inception import fid_inception_template

    saved = pfi.fid_inception_v3
    pfi.fid_inception_v3 = fid_inception_template
    try:
        return pfi.InceptionV3([pfi.InceptionV3.BLOCK_INDEX_BY_DIM[2048]])
    finally:
        pfi.fid_inception_v3 = saved


def cyclegan_step_fn(args, dev, autocast, compiled):
    """One CycleGAN iteration as pytorch-CycleGAN-and-pix2pix's ``optimize_parameters``
    does it (and vitlab's trainer): G_A, G_B forward; LSGAN + 10 L1 cycle + 5 L1 identity;
    backward; Adam on both generators; the discriminators on pooled fakes (history of 50),
    backward, Adam. Generators are the ViTUnet reference of tools/make_fixtures.py."""
    import random

    random.seed(0)

    import torch
    import torch.nn.functional as F

    generator, size = args.model.rsplit("-", 1)
    block = {"vitunet": "vit", "vit22bunet": "vit22b"}[generator]
    depth, dim, mlp, heads = SIZES[size]
    depth = args.depth or depth
    make_g = lambda: ViTUnet(block, depth, dim, mlp, heads, args.image_size, args.patch_size,
                             refiner_width=args.refiner_width)
    g_a, g_b = make_g().to(dev), make_g().to(dev)
    d_a, d_b = Discriminator(args.discriminator).to(dev), Discriminator(args.discriminator).to(dev)
    opt_g = torch.optim.Adam(list(g_a.parameters()) + list(g_b.parameters()), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(list(d_a.parameters()) + list(d_b.parameters()), lr=2e-4, betas=(0.5, 0.999))
    pools = ([], [])

    def query(pool, images):
        out = []
        for im in images.detach():
            im = im.unsqueeze(0)
            if len(pool) < 50:
                pool.append(im)
                out.append(im)
            elif random.random() < 0.5:
                k = random.randrange(50)
                out.append(pool[k].clone())
                pool[k] = im
            else:
                out.append(im)
        return torch.cat(out, 0)

    x = lambda: (torch.rand(args.batch, 3, args.image_size, args.image_size) * 2 - 1).to(dev)
    real_a, real_b = x(), x()
    # Compiled copies run the forward passes; the optimisers hold the originals' parameters.
    g_a_, g_b_, d_a_, d_b_ = g_a, g_b, d_a, d_b
    g_a, g_b, d_a, d_b = (compiled(m) for m in (g_a, g_b, d_a, d_b))

    def step():
        with autocast():
            step_g()
        pb, pa = query(pools[0], fake[0]), query(pools[1], fake[1])
        with autocast():
            loss_d = ((d_a(real_b) - 1) ** 2).mean() + (d_a(pb) ** 2).mean() \
                + ((d_b(real_a) - 1) ** 2).mean() + (d_b(pa) ** 2).mean()
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()

    fake = [None, None]

    def step_g():
        fake_b, fake_a = g_a(real_a), g_b(real_b)
        fake[0], fake[1] = fake_b, fake_a
        rec_a, rec_b = g_b(fake_b), g_a(fake_a)
        for d in (d_a_, d_b_):
            d.requires_grad_(False)
        loss_g = ((d_a(fake_b) - 1) ** 2).mean() + ((d_b(fake_a) - 1) ** 2).mean() \
            + 10 * F.l1_loss(rec_a, real_a) + 10 * F.l1_loss(rec_b, real_b) \
            + 5 * F.l1_loss(g_a(real_b), real_b) + 5 * F.l1_loss(g_b(real_a), real_a)
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()
        for d in (d_a_, d_b_):
            d.requires_grad_(True)

    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="vit-tiny")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--patch-size", type=int, default=4)
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--infer-batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--mode", choices=["train", "infer"], default="train")
    ap.add_argument("--depth", type=int, default=0, help="CycleGAN: generator depth (0: the size's)")
    ap.add_argument("--refiner-width", type=int, default=64)
    ap.add_argument("--discriminator", default="patchgan")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model(s) (inductor)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = ap.parse_args()

    import contextlib

    import torch

    dev = torch.device(args.device)
    stack = "pytorch-compile" if args.compile else "pytorch"

    def autocast():
        if args.precision == "bf16":
            return torch.autocast(args.device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    def peak():
        return torch.cuda.max_memory_allocated() // 1024 if args.device == "cuda" else peak_rss_kib()

    def compiled(m):
        return torch.compile(m) if args.compile else m

    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    base = 0 if args.device == "cuda" else peak_rss_kib()
    batch = args.batch if args.mode == "train" else args.infer_batch
    if args.model.startswith(("vitunet-", "vit22bunet-")):
        step = cyclegan_step_fn(args, dev, autocast, compiled)
        times = []
        for i in range(args.warmup + args.steps):
            t = time.perf_counter()
            step()
            sync()
            if i >= args.warmup:
                times.append((time.perf_counter() - t) * 1000)
        print(json.dumps(dict(stack=stack, mode="train", batch=args.batch, step_ms=times,
                              peak_rss_kib=peak(), base_rss_kib=base)))
        return
    if args.model == "inception-fid":
        # pytorch-fid's feature extraction: [0, 1] images, resized to 299 inside the model.
        model = build_inception_fid()
        x = torch.randint(0, 256, (batch, 3, args.image_size, args.image_size)).float() / 255
    else:
        block, size = args.model.rsplit("-", 1)
        model = build(block, size, args.image_size, args.patch_size, args.num_classes)
        x = torch.randn(batch, 3, args.image_size, args.image_size)
    model, x = model.to(dev), x.to(dev)
    y = (torch.arange(batch) * 7 % args.num_classes).to(dev)
    run = compiled(model)
    times = []
    if args.mode == "train":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()
        for i in range(args.warmup + args.steps):
            t = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_fn(run(x), y)
            loss.backward()
            opt.step()
            sync()
            if i >= args.warmup:
                times.append((time.perf_counter() - t) * 1000)
    else:
        model.eval()
        with torch.inference_mode(), autocast():
            for i in range(args.warmup + args.steps):
                t = time.perf_counter()
                run(x)
                sync()
                if i >= args.warmup:
                    times.append((time.perf_counter() - t) * 1000)
    print(json.dumps(dict(stack=stack, mode=args.mode, batch=batch, step_ms=times,
                          peak_rss_kib=peak(), base_rss_kib=base)))


if __name__ == "__main__":
    main()
