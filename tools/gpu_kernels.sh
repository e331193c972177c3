#!/usr/bin/env bash
# tools/gpu_kernels.sh OUTDIR — the GPU tier for the CUDA kernels, on a machine with an NVIDIA GPU:
# builds (Ninja, Release, sm_90a, all cores) only rill_cuda_tests and cuda_kernels_bench, runs
# `ctest -L cuda --output-on-failure`, then the kernel benchmark. Logs and the results table go
# to OUTDIR (build.log, ctest.log, bench.log, results.md, summary.txt).
# Env: BUILD_DIR (default build-gpu), PREFIX_DEBS (a folder of .deb files with headers the machine
# lacks, unpacked to /tmp/pfx and put on the search paths), SKIP_TESTS=1, SKIP_BENCH=1,
# GTEST_FILTER (passed to the test binary via ctest's environment).
set -uo pipefail
OUT=${1:?usage: tools/gpu_kernels.sh OUTDIR}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
JOBS=$(nproc)
EXTRA=()
if [[ -n "${PREFIX_DEBS:-}" ]]; then
  mkdir -p /tmp/pfx
  for f in "$PREFIX_DEBS"/*.deb; do dpkg -x "$f" /tmp/pfx; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/pfx
  export PKG_CONFIG_PATH=/tmp/pfx/usr/lib/x86_64-linux-gnu/pkgconfig:/tmp/pfx/usr/share/pkgconfig
  export LD_LIBRARY_PATH=/tmp/pfx/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  EXTRA=(-DCMAKE_PREFIX_PATH=/tmp/pfx/usr -DICU_ROOT=/tmp/pfx/usr)
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >"$OUT/summary.txt" 2>&1
echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) $(date -u +%FT%TZ)" >>"$OUT/summary.txt"

t0=$(date +%s)
{
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRILL_CUDA=ON \
    -DRILL_CUDA_ARCHITECTURES=90a "${EXTRA[@]}" &&
    cmake --build "$BUILD" --target rill_cuda_tests cuda_kernels_bench -j"$JOBS"
} >"$OUT/build.log" 2>&1
build_rc=$?
echo "build rc=$build_rc ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/summary.txt"
if [[ $build_rc -ne 0 ]]; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40
  exit 1
fi

test_rc=0
if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  t0=$(date +%s)
  (cd "$BUILD" && ctest -L cuda --output-on-failure --timeout "${TEST_TIMEOUT:-300}") >"$OUT/ctest.log" 2>&1
  test_rc=$?
  echo "ctest rc=$test_rc ($(( $(date +%s) - t0 )) s)" | tee -a "$OUT/summary.txt"
  grep -E "tests passed|tests failed|\*\*\*Failed|Failed|Skipped" "$OUT/ctest.log" | head -40 | tee -a "$OUT/summary.txt"
fi

if [[ "${SKIP_BENCH:-0}" != 1 ]]; then
  timeout "${BENCH_TIMEOUT:-180}" "$BUILD/bench/cuda_kernels_bench" >"$OUT/bench.log" 2>&1
  echo "bench rc=$?" | tee -a "$OUT/summary.txt"
  sed -n '/^| benchmark/,$p' "$OUT/bench.log" >"$OUT/results.md"
  cat "$OUT/results.md"
fi
exit $test_rc
