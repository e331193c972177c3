#!/usr/bin/env bash
# tools/gpu_run.sh OUTDIR — the whole GPU loop in one run on the H200 machine: build with all
# cores (sm_90a), `ctest -L cuda`, a qwen3-8b-shaped random bf16 model, and the benchmarks.
# Logs and a results table go to OUTDIR (at most 8 files). The machine lacks the PCRE2, ICU,
# Highway and xxhash headers: their Debian packages travel in .carry/debs and are unpacked here.
# Usage there: tools/gpu_run.sh "$OUT" [quick|lite|full]
#   quick: build + ctest; lite: + batch-1 decode at 512 and prefill at 4096; full: every benchmark.
set -uo pipefail
out="${1:?usage: tools/gpu_run.sh OUTDIR [quick]}"
mode="${2:-full}"
mkdir -p "$out"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { echo "[gpu_run $(date +%H:%M:%S)] $*" | tee -a "$out/summary.txt"; }

mkdir -p /tmp/pfx
for f in .carry/debs/*.deb; do dpkg -x "$f" /tmp/pfx; done
export PKG_CONFIG_SYSROOT_DIR=/tmp/pfx
export PKG_CONFIG_PATH=/tmp/pfx/usr/lib/x86_64-linux-gnu/pkgconfig:/tmp/pfx/usr/share/pkgconfig
export LD_LIBRARY_PATH=/tmp/pfx/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv | tee -a "$out/summary.txt"
log "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

log "configure + build ($(nproc) cores)"
if ! { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DRILL_CUDA=ON -DRILL_CUDA_ARCHITECTURES=90a \
         -DRILL_BUILD_BENCH=ON -DCMAKE_PREFIX_PATH=/tmp/pfx/usr -DICU_ROOT=/tmp/pfx/usr &&
       cmake --build build-gpu -j"$(nproc)" --target rill rill_cuda_tests ${RILL_EXTRA_TARGETS:-}; } > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  log "BUILD FAILED"
  exit 1
fi
log "build ok"

ctest --test-dir build-gpu -L cuda --output-on-failure --timeout 600 > "$out/ctest_cuda.log" 2>&1
ctest_rc=$?
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest_cuda.log" | tail -15 | tee -a "$out/summary.txt"
log "ctest -L cuda rc=$ctest_rc"
[[ "$mode" == quick ]] && exit $ctest_rc

bench() {  # label, args...
  local label="$1"; shift
  log "bench $label: rill bench $*"
  build-gpu/rill bench --device cuda "$@" 2>>"$out/bench_stderr.log" | tee -a "$out/bench.log" | grep -E "tokens_per_s" |
    sed "s/^/  $label: /" | tee -a "$out/summary.txt"
}
log "make-model qwen3-8b"
build-gpu/rill make-model --shape qwen3-8b --out /tmp/q8 > /dev/null 2>>"$out/bench_stderr.log" || log "make-model failed"
bench "b1 ctx512" --model /tmp/q8 --prompt-len 512 --decode-tokens 128
if [[ "$mode" == lite ]]; then
  bench "prefill 4096" --model /tmp/q8 --prompt-len 4096 --decode-tokens 1
  log "done (lite)"
  exit $ctest_rc
fi
bench "b1 ctx8192" --model /tmp/q8 --prompt-len 8192 --decode-tokens 64
for b in 16 64 256; do bench "b$b ctx512" --model /tmp/q8 --prompt-len 512 --decode-tokens 32 --batch "$b"; done
for p in 512 4096 16384; do bench "prefill $p" --model /tmp/q8 --prompt-len "$p" --decode-tokens 1; done
log "done"
