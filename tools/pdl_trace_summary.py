#!/usr/bin/env python3
"""Summarise a programmatic-launch trace (a build with -DRILL_PDL_TRACE=ON, run with RILL_PDL_TRACE=FILE).

Each record is one kernel: when its first CTA reached pdl_wait ("arrive") and when the wait released
it ("release": the previous kernel had finished and its writes were visible). Steps are cut at the
step's last kernel (default: the argmax, reduce.cu); the last --steps steps of the most common
length are folded position by position (median over steps). For each kernel:
  span = next kernel's release - this release: its share of the step's critical path (its work after
         the wait, plus the completion hand-off to the next kernel);
  lead = this release - this arrival: how long it sat resident before its inputs were ready;
  work = this kernel's done record (pdl_trace_done: block 0 ended its work; line -1) - this release,
         where the kernel records one; the rest of its span is the hand-off to the next kernel;
  marks = pdl_trace_mark(tag) records (line -(10 + tag)) - this release, per tag, in the layer window.
Prints the step, a per-call-site total, and the positions of --layer-window kernels from --from.

usage: pdl_trace_summary.py TRACE.csv [--end-site reduce.cu] [--steps 32] [--from 0] [--layer-window 40]
"""
import argparse
import bisect
import collections
import csv
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--end-site", default="reduce.cu")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--from", dest="start", type=int, default=0)
    ap.add_argument("--layer-window", type=int, default=40)
    args = ap.parse_args()

    # Wait rows, and the records a kernel's block 0 adds after its wait: done (line -1, tag 0) and
    # marks (line -(10 + tag)). Slots are reserved out of stream order (a wait's before the wait), so
    # both are ordered by time: a kernel's release follows its predecessor's end, and a done or mark
    # belongs to the kernel with the last release at or before it; a mark slot its kernel did not
    # set (an older time) falls outside that kernel's release..done and is dropped.
    rows, extra = [], []
    with open(args.trace) as f:
        for r in csv.DictReader(f):
            line = int(r["line"])
            if line == -1 or line <= -11:
                extra.append((int(r["release_ns"]), 0 if line == -1 else -line - 10))
                continue
            site = r["file"].split("/")[-1] + ":" + r["line"]
            rows.append((int(r["release_ns"]), int(r["arrive_ns"]), int(r["release_ns"]), site))
    rows.sort()
    releases = [row[0] for row in rows]
    owned = collections.defaultdict(list)  # a wait row's release -> [(tag, time)]
    for t, tag in extra:
        k = bisect.bisect_right(releases, t) - 1
        if k >= 0:
            owned[rows[k][0]].append((tag, t))
    marks_of = collections.defaultdict(dict)  # a wait row's release -> {tag: time}
    for key, recs in owned.items():
        done = min((t for tag, t in recs if tag == 0), default=None)
        for tag, t in sorted(recs, key=lambda r: r[1]):
            if tag == 0 or (done is not None and t <= done):
                marks_of[key].setdefault(tag, t)
    done_of = {key: m[0] for key, m in marks_of.items() if 0 in m}  # a wait row's release -> its done time
    n_done = sum(1 for e in extra if e[1] == 0)
    n_marks = sum(len(m) for m in marks_of.values()) - len(done_of)
    print(f"{len(rows)} records ({n_done} done records, {n_marks} marks kept)")
    steps, cur = [], []
    for row in rows:
        cur.append(row)
        if row[3].startswith(args.end_site):
            steps.append(cur)
            cur = []
    lengths = collections.Counter(len(s) for s in steps)
    if not lengths:
        print("no step ends found")
        return
    length, _ = lengths.most_common(1)[0]
    idx = [i for i, s in enumerate(steps) if len(s) == length and i + 1 < len(steps)]
    idx = idx[-args.steps:]
    print(f"step length {length} kernels; {len(idx)} steps used (of {len(steps)}; lengths {dict(lengths)})")

    spans = [[] for _ in range(length)]
    leads = [[] for _ in range(length)]
    works = [[] for _ in range(length)]
    mark_times = [collections.defaultdict(list) for _ in range(length)]
    totals = []
    for i in idx:
        s, nxt = steps[i], steps[i + 1]
        totals.append(nxt[0][2] - s[0][2])
        for p in range(length):
            nrel = s[p + 1][2] if p + 1 < length else nxt[0][2]
            spans[p].append(nrel - s[p][2])
            leads[p].append(s[p][2] - s[p][1])
            if s[p][0] in done_of:
                works[p].append(done_of[s[p][0]] - s[p][2])
            for tag, t in marks_of.get(s[p][0], {}).items():
                if tag:
                    mark_times[p][tag].append(t - s[p][2])
    sites = [steps[idx[-1]][p][3] for p in range(length)]
    med_span = [statistics.median(v) for v in spans]
    med_lead = [statistics.median(v) for v in leads]
    med_work = [statistics.median(v) if v else None for v in works]
    print(f"step (release of the first kernel to the next step's): median {statistics.median(totals) / 1e3:.1f} us, "
          f"min {min(totals) / 1e3:.1f}, max {max(totals) / 1e3:.1f}")

    by_site = collections.OrderedDict()
    for p in range(length):
        t = by_site.setdefault(sites[p], [0, 0.0, 0.0, 0.0, 0])
        t[0] += 1
        t[1] += med_span[p]
        t[2] += med_lead[p]
        if med_work[p] is not None:
            t[3] += med_work[p]
            t[4] += 1
    print(f"\n{'site':<28}{'calls':>6}{'span us/step':>14}{'span us/call':>14}{'lead us/call':>14}"
          f"{'work us/call':>14}")
    for site, (n, sp, ld, wk, nw) in sorted(by_site.items(), key=lambda kv: -kv[1][1]):
        work = f"{wk / nw / 1e3:>14.2f}" if nw else f"{'-':>14}"
        print(f"{site:<28}{n:>6}{sp / 1e3:>14.1f}{sp / n / 1e3:>14.2f}{ld / n / 1e3:>14.2f}{work}")

    print(f"\npositions {args.start}..{args.start + args.layer_window - 1} (median us):")
    print(f"{'pos':>5}  {'site':<28}{'span':>9}{'lead':>9}{'work':>9}")
    for p in range(args.start, min(length, args.start + args.layer_window)):
        work = f"{med_work[p] / 1e3:>9.2f}" if med_work[p] is not None else f"{'-':>9}"
        mk = "  ".join(f"m{tag} {statistics.median(v) / 1e3:.2f}" for tag, v in sorted(mark_times[p].items()))
        print(f"{p:>5}  {sites[p]:<28}{med_span[p] / 1e3:>9.2f}{med_lead[p] / 1e3:>9.2f}{work}  {mk}")


if __name__ == "__main__":
    main()
