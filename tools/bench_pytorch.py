#!/usr/bin/env python3
"""The PyTorch side of `vitlab bench --against-pytorch`: one measurement per process.

Times training steps (forward, cross-entropy, backward, AdamW step) or
inference batches of the same model vitlab benchmarks, written the way a
PyTorch user would: the plain ViT is timm's ``VisionTransformer`` (fused
``scaled_dot_product_attention``), the ViT-22B variants are the reference
modules of ``tools/make_fixtures.py``. Eager mode, fp32, all CPU threads. ``--model inception-fid``
is pytorch-fid's feature extraction (InceptionV3, 2048-d pool, inputs resized to 299).

Prints one JSON line: {"stack", "mode", "batch", "step_ms", "peak_rss_kib", "base_rss_kib"}.

    python3 tools/bench_pytorch.py --model vit-tiny --image-size 32 --patch-size 4 --batch 128 --mode train
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SIZES, ViT  # noqa: E402  (the reference implementation of docs/MODELS.md)


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
    args = ap.parse_args()

    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    base = peak_rss_kib()
    batch = args.batch if args.mode == "train" else args.infer_batch
    if args.model == "inception-fid":
        # pytorch-fid's feature extraction: [0, 1] images, resized to 299 inside the model.
        model = build_inception_fid()
        x = torch.randint(0, 256, (batch, 3, args.image_size, args.image_size)).float() / 255
    else:
        block, size = args.model.rsplit("-", 1)
        model = build(block, size, args.image_size, args.patch_size, args.num_classes)
        x = torch.randn(batch, 3, args.image_size, args.image_size)
    y = torch.arange(batch) * 7 % args.num_classes
    times = []
    if args.mode == "train":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
        loss_fn = torch.nn.CrossEntropyLoss()
        for i in range(args.warmup + args.steps):
            t = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            if i >= args.warmup:
                times.append((time.perf_counter() - t) * 1000)
    else:
        model.eval()
        with torch.inference_mode():
            for i in range(args.warmup + args.steps):
                t = time.perf_counter()
                model(x)
                if i >= args.warmup:
                    times.append((time.perf_counter() - t) * 1000)
    print(json.dumps(dict(stack="pytorch", mode=args.mode, batch=batch, step_ms=times,
                          peak_rss_kib=peak_rss_kib(), base_rss_kib=base)))


if __name__ == "__main__":
    main()
