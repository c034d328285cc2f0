#!/usr/bin/env python3
"""Checks the size limits the layout keeps (docs/ARCHITECTURE.md): no Rust file over
--max-file lines and no function over --max-fn lines, but for the functions named
with --except (FILE_SUFFIX:FUNCTION). Prints the longest ones; exits 1 on a breach.

    python3 tools/check_sizes.py crates --max-file 650 --max-fn 120 --except tensor_file/pickle.rs:run

A function is measured from its `fn` line to the brace that closes its body (a
brace count that ignores braces inside string and char literals and comments).
"""
import argparse
import os
import re
import sys

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(async\s+)?(unsafe\s+)?(const\s+)?fn\s+(\w+)")


def code_braces(line, state):
    """Net brace count of one line outside strings, chars and comments; `state`
    carries an open block comment or string across lines."""
    n, i = 0, 0
    while i < len(line):
        c = line[i]
        if state["block"]:
            if line.startswith("*/", i):
                state["block"] = False
                i += 1
        elif state["string"]:
            if c == "\\":
                i += 1
            elif c == '"':
                state["string"] = False
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            state["block"] = True
            i += 1
        elif c == '"':
            state["string"] = True
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", line[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", line[i:]).group(0)) - 1
        elif c == "{":
            n += 1
        elif c == "}":
            n -= 1
        i += 1
    return n


def functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        state = {"block": False, "string": False}
        depth, started = 0, False
        for j in range(i, len(lines)):
            d = code_braces(lines[j], state)
            if d > 0 or "{" in lines[j]:
                started = started or d > 0 or lines[j].count("{") > 0
            depth += d
            if started and depth <= 0:
                out.append((j - i + 1, m.group(6), i + 1))
                break
            if not started and lines[j].rstrip().endswith(";"):
                break
    return len(lines), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--max-file", type=int, default=650)
    ap.add_argument("--max-fn", type=int, default=120)
    ap.add_argument("--except", dest="excepted", action="append", default=[])
    ap.add_argument("--top", type=int, default=5)
    a = ap.parse_args()
    files, fns = [], []
    for root, _, names in os.walk(a.root):
        if "/target" in root or "/fixtures" in root:
            continue
        for name in names:
            if name.endswith(".rs"):
                p = os.path.join(root, name)
                n, found = functions(p)
                files.append((n, p))
                fns.extend((length, p, line, f) for length, f, line in found)
    files.sort(reverse=True)
    fns.sort(reverse=True)
    excepted = lambda p, f: any(p.endswith(e.split(":")[0]) and f == e.split(":")[1] for e in a.excepted)
    print("longest files:", ", ".join(f"{p} {n}" for n, p in files[: a.top]))
    print("longest functions:", ", ".join(f"{p}:{line} {f} {n}" for n, p, line, f in fns[: a.top]))
    bad = [f"{p}: {n} lines (limit {a.max_file})" for n, p in files if n > a.max_file]
    bad += [f"{p}:{line}: fn {f} is {n} lines (limit {a.max_fn})" for n, p, line, f in fns if n > a.max_fn and not excepted(p, f)]
    for b in bad:
        print("error:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
