#!/usr/bin/env python3
"""tools/code_footprint.py NCU_LOG [SASS_DUMP] — how much code each kernel of a decode step runs.

NCU_LOG: `ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,smsp__warps_launched.sum[,...]`
over the step's kernels (gpu_run.sh's footprint mode). Per kernel and grid: launches, mean µs, and
instructions executed a warp — times 16 bytes of SASS an instruction, the most code one warp's path can
touch (loops count again, so a bound on the path's footprint, exact for straight-line kernels). An SM
keeps ~64-96 KB of code (bench/RESULTS.md run AC6) and fetches what it lacks from L2 at ~1.7 µs a KB
behind the decode's weight stream (AC4), so these are the numbers to hold against that.
SASS_DUMP (optional): `cuobjdump -sass` of the binary — each kernel's whole SASS size, for comparison.
Any other metric in the log (e.g. a stall reason) is averaged per kernel and printed too.
"""
import collections
import re
import subprocess
import sys

SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def short(name):
    """A kernel's name as ncu and c++filt both give it: no namespaces, no parameters, bools as 0/1."""
    name = re.sub(r"\(.*", "", name.replace("void ", "").replace("(anonymous namespace)", "<unnamed>"))
    name = re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", name))
    return re.sub(r"^([\w<>]+::|<unnamed>::|unnamed>::)+", "", name.replace("rill::cuda::", ""))


def ncu_table(path):
    rows = collections.OrderedDict()  # (kernel, grid) -> {metric: [values]}
    key = None
    for line in open(path, errors="replace"):
        head = re.match(r"\s+(.+?)\s+\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)", line)
        if head and "Context" in line:
            key = (short(head.group(1)), f"({head.group(2)},{head.group(3)},{head.group(4)})")
            rows.setdefault(key, collections.defaultdict(list))
            continue
        m = re.match(r"\s+([a-z_]+__[\w.]+)\s+(?:(\S+)\s+)?([\d.,]+)\s*$", line)  # name [unit] value
        if m and key:
            value = float(m.group(3).replace(",", ""))
            rows[key][m.group(1)].append(value * SCALE.get(m.group(2) or "", 1.0))
    return rows


def sass_sizes(path):
    sizes, cur = {}, None
    for line in open(path, errors="replace"):
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            cur = m.group(1)
            sizes[cur] = 0
        elif cur and re.match(r"\s+/\*[0-9a-f]{4,}\*/", line):
            sizes[cur] += 16
    try:  # readable names where c++filt exists
        out = subprocess.run(["c++filt"], input="\n".join(sizes), capture_output=True, text=True, check=True).stdout
        return {short(d): s for d, s in zip(out.splitlines(), sizes.values())}
    except (OSError, subprocess.CalledProcessError):
        return sizes


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = ncu_table(sys.argv[1])
    sizes = sass_sizes(sys.argv[2]) if len(sys.argv) > 2 else {}
    extra = sorted({m for r in rows.values() for m in r} -
                   {"gpu__time_duration.sum", "smsp__inst_executed.sum", "smsp__warps_launched.sum"})
    print(f"{'launches':>8} {'mean us':>8} {'inst/warp':>10} {'KB/warp':>8} {'SASS KB':>8}"
          + "".join(f" {e[:28]:>28}" for e in extra) + "  kernel grid")
    for (kernel, grid), r in sorted(rows.items(), key=lambda kv: -sum(kv[1].get("gpu__time_duration.sum", [0]))):
        n = len(r.get("gpu__time_duration.sum", []))
        us = sum(r["gpu__time_duration.sum"]) / n if n else 0.0
        inst, warps = sum(r.get("smsp__inst_executed.sum", [0])), sum(r.get("smsp__warps_launched.sum", [0]))
        per_warp = inst / warps if warps else 0.0
        sass = next((s for k, s in sizes.items() if k == kernel), None)
        sass_txt = f"{sass / 1024:8.1f}" if sass else f"{'-':>8}"
        ex = "".join(f" {sum(r[e]) / len(r[e]):28.2f}" if r.get(e) else f" {'-':>28}" for e in extra)
        print(f"{n:8d} {us:8.2f} {per_warp:10.0f} {per_warp * 16 / 1024:8.1f} {sass_txt}{ex}  {kernel} {grid}")
    if sizes:
        print("\nlargest SASS (KB):")
        for k, s in sorted(sizes.items(), key=lambda kv: -kv[1])[:25]:
            print(f"  {s / 1024:7.1f}  {k[:150]}")


if __name__ == "__main__":
    main()
