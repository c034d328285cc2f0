#!/usr/bin/env python3
"""The Markdown scaling table of docs/PERFORMANCE.md from tools/scaling.sh's JSON files.

    python3 tools/scaling_table.py OUT

One line per row and mode: images/s of flex, LibTorch (tch) and PyTorch eager, each
vitlab stack's ratio to PyTorch measured in the same invocation, the achieved GFLOP/s
(analytic count; ViT rows only) and peak memory. Where some row also timed
torch.compile (COMPILE=1), three more columns: its images/s and the ratios to it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: Path) -> None:
    files = sorted(out.glob("*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        sys.exit(f"{out}: no row files (*.json); run tools/scaling.sh {out} first")
    commit = (out / "COMMIT").read_text().strip() if (out / "COMMIT").exists() else "?"
    tables = []
    for f in files:
        try:
            tables.append((f, json.loads(f.read_text())))
        except json.JSONDecodeError as e:
            sys.exit(f"{f}: not the JSON of `vitlab bench --format json` ({e})")
    compiled = any(r["stack"] == "pytorch-compile" for _, rows in tables for r in rows)
    extra = " compile | flex x compile | tch x compile |" if compiled else ""
    print(f"Commit {commit}; img/s, ratio to PyTorch eager in the same invocation, achieved GFLOP/s (ViT rows), peak MiB.\n")
    print(f"| row | mode | batch | flex | tch | PyTorch | flex x PT | tch x PT | GFLOP/s flex / tch / PT | MiB flex / tch / PT |{extra}")
    print("|---|---|---|---|---|---|---|---|---|---|" + "---|" * extra.count("|"))
    for f, rows in tables:
        for mode in ("train", "infer"):
            by = {r["stack"]: r for r in rows if r["mode"] == mode}
            if not by:
                continue
            get = lambda s, k, fmt: fmt.format(by[s][k]) if s in by and by[s][k] is not None else "-"
            batch = next(iter(by.values()))["batch"]
            print(
                f"| {f.stem} | {mode} | {batch} | {get('flex', 'images_per_s', '{:.3g}')} | "
                f"{get('tch', 'images_per_s', '{:.3g}')} | {get('pytorch', 'images_per_s', '{:.3g}')} | "
                f"{get('flex', 'vs_pytorch', '{:.2f}')} | {get('tch', 'vs_pytorch', '{:.2f}')} | "
                f"{get('flex', 'gflops', '{:.0f}')} / {get('tch', 'gflops', '{:.0f}')} / {get('pytorch', 'gflops', '{:.0f}')} | "
                f"{get('flex', 'peak_rss_mib', '{:.0f}')} / {get('tch', 'peak_rss_mib', '{:.0f}')} / "
                f"{get('pytorch', 'peak_rss_mib', '{:.0f}')} |"
                + (
                    f" {get('pytorch-compile', 'images_per_s', '{:.3g}')} | {get('flex', 'vs_pytorch_compile', '{:.2f}')} | "
                    f"{get('tch', 'vs_pytorch_compile', '{:.2f}')} |"
                    if compiled
                    else ""
                )
            )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 tools/scaling_table.py OUT")
    main(Path(sys.argv[1]))
