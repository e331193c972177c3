#!/usr/bin/env python3
"""tools/ncu_summary.py LOG — sums an `ncu --metrics gpu__time_duration.sum` log per kernel and
grid: total µs, count, mean, largest first (the per-kernel breakdown of a decode step)."""
import collections
import re
import sys

scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
totals = collections.defaultdict(list)
name = None
for line in open(sys.argv[1], errors="replace"):
    head = re.match(r"\s+(.+?)\s+\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)", line)
    if head and "Context" in line:
        kernel = head.group(1).replace("(anonymous namespace)::", "").replace("unnamed>::", "")
        kernel = re.sub(r"\(.*", "", kernel.replace("void ", ""))
        name = f"{kernel} grid({head.group(2)},{head.group(3)},{head.group(4)})"
        continue
    m = re.search(r"gpu__time_duration.sum\s+(\w+)\s+([\d.,]+)", line)
    if m and name:
        totals[name].append(float(m.group(2).replace(",", "")) * scale.get(m.group(1), 1.0))
        name = None
all_us = sum(sum(v) for v in totals.values())
print(f"ncu: {sum(len(v) for v in totals.values())} kernels, {all_us:.1f} us in total")
for k, v in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
    print(f"  {sum(v):9.1f} us {len(v):4d} x {sum(v) / len(v):7.2f} us  {k}")
