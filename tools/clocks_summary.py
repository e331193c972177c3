#!/usr/bin/env python3
"""Summarise nvidia-smi samples taken while benchmarks ran (tools/gpu_run.sh's clocks_start/clocks_stop).

Input: CSV lines "SM MHz, memory MHz, W, C[, clock event reasons]" (--format=csv,noheader,nounits). Prints one
line: how many samples had the GPU busy (above 200 W), and over those the median [min-max] of each column and
the distinct event reasons (0x4: the software power cap).

usage: clocks_summary.py LABEL CLOCKS.csv
"""
import statistics
import sys


def main():
    label, path = sys.argv[1], sys.argv[2]
    rows = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        try:
            rows.append((float(f[0]), float(f[1]), float(f[2]), float(f[3]), f[4] if len(f) > 4 else "?"))
        except (ValueError, IndexError):
            pass
    if not rows:
        print(f"  {label}: no clock samples")
        return
    busy = [r for r in rows if r[2] > 200] or rows  # samples while the GPU works (power above idle)

    def col(i):
        v = [r[i] for r in busy]
        return f"{statistics.median(v):.0f} [{min(v):.0f}-{max(v):.0f}]"

    reasons = sorted({r[4] for r in busy})
    print(f"  {label}: {len(busy)} of {len(rows)} samples busy; SM MHz {col(0)}, memory MHz {col(1)}, "
          f"W {col(2)}, C {col(3)}; event reasons {' '.join(reasons)}")


if __name__ == "__main__":
    main()
