#!/usr/bin/env python3
"""Sum a `perf record` profile's samples by where they land (docs/PERFORMANCE.md's tables).

    perf record -F 499 -g -o flex.data -- target/release/vitlab bench --backend flex --only train ...
    perf report -i flex.data --no-children --stdio --sort dso,symbol -F sample,dso,sym 2>/dev/null \
        | python3 tools/perf_categories.py

Reads perf's report on stdin (lines `SAMPLES  DSO  [.] SYMBOL`), prints one row per
category (the first pattern that matches a symbol, checked in the order below) with
its samples and share, and the largest symbols left in "other" so that a new hot
spot does not hide there.
"""
import re
import sys

# (category, regex on "dso symbol"), first match wins.
CATEGORIES = [
    ("OS kernel (page faults, zeroing, scheduling)", r"\[kernel|\[k\]"),
    ("matrix kernel: gemm crate (flex)", r"gemm_f32|gemm_common|gemm::|nano_gemm|microkernel"),
    ("matrix kernel: MKL / oneDNN (LibTorch, PyTorch)", r"mkl_|sgemm|dnnl|jit_avx|jit_uni|brgemm"),
    ("attention (flex_attn, flash attention)", r"flex_attn|flash_attention|sdpa|_scaled_dot"),
    ("convolution outside the matrix kernel (im2col, col2im)", r"flex_conv|im2col|col2im|convolution"),
    ("GELU / erf", r"erf|gelu"),
    ("exp (softmax)", r"\bexpf?\b|__expf|exp_|softmax"),
    ("layer norm", r"layer_norm|layernorm|LayerNorm|flex_norm"),
    ("copies and fills (memcpy, memset, tiled copies)", r"memmove|memcpy|memset|copy|fill"),
    ("allocator (malloc, free)", r"malloc|_int_free|cfree|\bfree\b|realloc|_int_malloc|alloc::"),
    ("threads (rayon, OpenMP, futex, spinning)", r"rayon|crossbeam|gomp|kmp|omp_|futex|sched_yield|spin"),
    ("element-wise and reductions (burn-flex, ATen)", r"flex_linear|binary|unary|burn_flex|reduce|sum|at::native|vectorized|Vectorized|add_kernel|mul_kernel"),
    ("Python interpreter", r"python|_PyEval|Py[A-Z]"),
]


def main() -> None:
    rows = []
    for line in sys.stdin:
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"\s*(\d+)\s+(\S+)\s+(.*)$", line)
        if m:
            rows.append((int(m.group(1)), f"{m.group(2)} {m.group(3).strip()}"))
    if not rows:
        sys.exit("perf_categories.py: no `SAMPLES DSO SYMBOL` lines on stdin (perf report ... -F sample,dso,sym)")
    totals = {name: 0 for name, _ in CATEGORIES}
    other = []
    for n, what in rows:
        for name, pattern in CATEGORIES:
            if re.search(pattern, what):
                totals[name] += n
                break
        else:
            other.append((n, what))
    total = sum(n for n, _ in rows)
    print("| where | samples | share |")
    print("|---|---|---|")
    for name, _ in CATEGORIES:
        if totals[name]:
            print(f"| {name} | {totals[name]:,} | {100 * totals[name] / total:.1f} % |")
    rest = sum(n for n, _ in other)
    print(f"| other | {rest:,} | {100 * rest / total:.1f} % |")
    print(f"| total | {total:,} | |")
    other.sort(reverse=True)
    print("\nlargest in other:")
    for n, what in other[:12]:
        print(f"  {n:8,}  {what[:110]}")


if __name__ == "__main__":
    main()
