#!/usr/bin/env bash
# tools/gpu_run.sh OUTDIR — the whole GPU loop in one run on the H200 machine: build with all
# cores (sm_90a), `ctest -L cuda`, a qwen3-8b-shaped random bf16 model, and the benchmarks.
# Logs and a results table go to OUTDIR (at most 8 files). The machine lacks the PCRE2, ICU,
# Highway and xxhash headers: their Debian packages travel in .carry/debs and are unpacked here.
# Before each call, here: tools/gpu_debs.sh (once) and tools/gpu_stamp.sh (names the commit and tree that run).
# Every call first logs the die it runs on (UUID, copy rate, GPCs, round trips and read-stream rate), and every
# decode figure in summary.txt carries its bounds on that die (tools/decode_bound.py).
# Usage there: tools/gpu_run.sh "$OUT" [quick|lite|decode|attn-decode|sweep|prefill|batches|final|figures|dense|
#   serve|serve-ab|full|profile|attn|trace|ab|leave-out|footprint|probes]
#   quick: build + ctest -L cuda + the engine's Cuda* tests; lite: + b1 decode and prefill at 512/4096
#   in both matmul modes; decode: quick + (RILL_READ_PROBE=1) weight read patterns (bench/kernels/read_probe.cu), the decode
#   GEMM per shape and configuration, the default mode's decode at batch 1-256 and per decode
#   configuration (RILL_BREAKDOWN=1: the per-kernel breakdown); sweep: quick + batch-1 decode under each decode-GEMM configuration and
#   split policy; prefill: the warpgroup GEMM's tests first, then quick, the GEMM configurations for
#   M > 16, prefill at 512/4096/16384 (and with the mma.sync attention), decode at batch 1-256
#   (RILL_BREAKDOWN_CTX=N: the attention kernels at context N under Nsight Compute; RILL_ATTN_PROFILE=N:
#   the batch-1 decode attention kernel's Nsight Compute sections at context N; also in final mode);
#   final: quick + the ceilings, the GEMMs for M > 16, every rill bench figure of RESULTS.md in
#   both modes (no 16384 autotuned) and a batch-1 decode breakdown (RILL_BREAKDOWN64=1: also batch 64); batches: the warpgroup GEMM's
#   tests, quick, decode at batch 1-256; dense: quick + the ceilings, kernel figures and every dense-model `rill bench`
#   figure with a per-kernel breakdown; serve: build + the serving-engine cells and the Qwen3.5-9B
#   figures (no tests); full: dense then serve (longer than one 10-minute device call); profile:
#   Nsight Compute sections of the prefill GEMM and attention kernels, per-kernel prefill and decode times;
#   attn: the warpgroup kernels' tests, quick, prefill with each attention kernel; attn-decode: quick + batch-1
#   decode at 512 / 8192 / 16384 (+ RILL_BREAKDOWN_CTX); trace: no tests — a second build with
#   -DRILL_PDL_TRACE=ON and the batch-1 decode step's per-kernel critical-path spans in the replayed
#   graph at the contexts of RILL_TRACE_CTX (default "512 8192"; tools/pdl_trace_summary.py; RILL_TRACE_BATCH: the
#   batch sizes, default 1; RILL_TRACE_WINDOW:
#   kernels a layer, default 12; RILL_PDL_TRACE_TWICE=attention,rope,norm launches those twice, launch.h);
#   power: no tests (RILL_SKIP_CTEST=1) — long decodes (batch 1 at 512 / 8,192 keys, batch 64) with the GPU's
#   clocks, power and temperature sampled every 20 ms while they run;
#   gemm-profile: no model, no tests — the warpgroup GEMM's configurations (RILL_PROFILE_CONFIGS, default 12,14) per
#   (N, K) of RILL_GEMM_SHAPES, then Nsight Compute sections of configuration 12 and of cuBLASLt at 4096³;
#   figures: quick + the ceilings and RESULTS.md's dense-model figures in the default mode only, each
#   decode figure with its host-time breakdown (--host-times), and the GPU's clocks, power and temperature
#   sampled while they run (also in ab mode); fits one 10-minute call (RILL_FIGURES_AB="NAME=V": the second pass
#   is batch-1 decode at 512 / 8,192 keys alternating the defaults and that setting); ab: settings
#   side by side — RILL_AB_ENVS="NAME=A NAME=B,OTHER=C ..." (a setting's variables joined by commas)
#   each running the RILL_AB_TESTS gtest filter, then
#   `rill bench` with RILL_AB_ARGS alternating over the settings RILL_AB_REPS times (RILL_AB_GEMM=CONFIGS: also
#   the GEMM timing test per setting, RILL_GEMM_SHAPES="N:K,..." its shapes) (a setting starting
#   with "--" is a rill bench flag instead, e.g. RILL_AB_ENVS="RILL_AB=default --sync-steps";
#   RILL_SKIP_CTEST=1 skips ctest -L cuda; RILL_AB_BASE_PATCH=FILE: every setting also on a `rill` built
#   from this tree with FILE reversed, i.e. the code before a change, alternating);
#   leave-out: no tests — a second build with -DRILL_LEAVE_OUT=ON and
#   `rill bench` (RILL_AB_ARGS) with each RILL_LEAVE_OUT of RILL_LEAVE_OUT_SETS (default "none n r ra nra":
#   captured decode steps without those ops — wrong outputs, what the step costs without them), RILL_AB_REPS times;
#   footprint: no tests — per kernel of a batch-1 decode step at RILL_FOOTPRINT_CTX (default "512 8192")
#   the instructions executed a warp (ncu) and the whole SASS size (cuobjdump): tools/code_footprint.py;
#   probes: no rill build, no tests — the lab probes of bench/kernels (RILL_PROBES, default "latency tile_stream
#   read"; also icache, handoff, burst_handoff, norm_prologue, kv_read: bench/kernels/NAME_probe.cu), each built
#   with nvcc and run alone, their tables to OUTDIR;
#   serve-ab: quick (RILL_SKIP_CTEST=1: no ctest) + `rill bench-serve` on the cells of RILL_SERVE_CELLS with
#   overlapped steps (the default) and with --sync-steps, alternating RILL_AB_REPS times (RILL_SERVE_SHAPE: a
#   model of that make-model shape instead of the qwen3-8b one).
# Any mode: RILL_REQUIRE_GPU=TEXT stops at once (exit 3) unless the GPU's name contains TEXT (e.g. H200).
# RILL_PREBUILT=1: no build here — the binaries `tools/gpu_test_binary.sh prepare` packed into build-bin/ (rill,
# cuda_kernels_bench, rill_cuda_tests; carry ["build-bin"], .carry not needed) stand in for build-gpu's, and the
# `ctest -L cuda` step runs that test binary (`tools/gpu_test_binary.sh run`); modes that build a second tree
# (trace, leave-out, RILL_AB_BASE_PATCH) and the engine's Cuda* tests need the build.
set -uo pipefail
out="${1:?usage: tools/gpu_run.sh OUTDIR [quick]}"
mode="${2:-full}"
mkdir -p "$out"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { echo "[gpu_run $(date +%H:%M:%S)] $*" | tee -a "$out/summary.txt"; }

# RILL_REQUIRE_GPU=TEXT: stop at once (exit 3, nothing built) unless the GPU's name contains TEXT, e.g. H200 — a
# call meant for one kind of card costs seconds, not a build, when the machine lent is another kind.
if [[ -n "${RILL_REQUIRE_GPU:-}" ]]; then
  gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  if [[ "$gpu_name" != *"$RILL_REQUIRE_GPU"* ]]; then
    log "RILL_REQUIRE_GPU=$RILL_REQUIRE_GPU: this GPU is '${gpu_name:-none found}'; nothing run"
    exit 3
  fi
fi

mkdir -p /tmp/pfx
prebuilt="${RILL_PREBUILT:-}"
if [[ -n "$prebuilt" ]]; then
  if [[ ! -f build-bin/rill.gz ]]; then
    log "RILL_PREBUILT=1 but no build-bin/rill.gz: run tools/gpu_test_binary.sh prepare BUILD_DIR here first"
    exit 2
  fi
elif [[ "$mode" != probes ]] && ! compgen -G ".carry/debs/*.deb" > /dev/null; then
  log "no .carry/debs/*.deb: run tools/gpu_debs.sh on the build machine first and carry .carry (the build needs them)"
  exit 2
fi
for f in .carry/debs/*.deb build-bin/debs/*.deb; do [[ -e "$f" ]] && dpkg -x "$f" /tmp/pfx; done
export PKG_CONFIG_SYSROOT_DIR=/tmp/pfx
export PKG_CONFIG_PATH=/tmp/pfx/usr/lib/x86_64-linux-gnu/pkgconfig:/tmp/pfx/usr/share/pkgconfig
export LD_LIBRARY_PATH=/tmp/pfx/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version,uuid,pci.bus_id --format=csv |
  tee -a "$out/summary.txt"
# The code that runs: tools/gpu_stamp.sh wrote .carry/STAMP (commit, tree hash) on the build machine; the
# commit is logged only if this tree hashes the same (the device's own git HEAD is not this tree's commit).
source tools/tree_hash.sh
tree="$(tree_hash)"
stamp_commit="" stamp_tree=""
stamp_file=.carry/STAMP
[[ -n "$prebuilt" ]] && stamp_file=build-bin/STAMP  # (prepare's stamp: the tree and the binaries' commit)
[[ -f "$stamp_file" ]] && read -r stamp_commit stamp_tree < "$stamp_file"
[[ -n "$prebuilt" && -f build-bin/STAMP ]] && log "prebuilt: $(tail -1 build-bin/STAMP)"
if [[ -n "$stamp_commit" && "$stamp_tree" == "$tree" ]]; then
  log "commit $stamp_commit (tree $tree, as stamped)"
else
  log "tree $tree: NOT the stamped ${stamp_commit:-(no .carry/STAMP: run tools/gpu_stamp.sh)}"
fi
# Which die this is (machines of the kind decode the same code 2-4% apart): its UUID, its GPCs' SM counts
# (bench/kernels/gpc_probe.cu) and its round trips idle and under a weight stream (latency_probe.cu), a few
# seconds before anything else runs on it.
nvcc_bin="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
for p in gpc latency; do
  "$nvcc_bin" -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I src "bench/kernels/${p}_probe.cu" \
    -o "/tmp/die_${p}_probe" > "/tmp/die_${p}_probe_build.log" 2>&1 &
done
wait
for p in gpc latency; do
  if [[ -x "/tmp/die_${p}_probe" ]]; then
    timeout 60 "/tmp/die_${p}_probe" 2>&1 | tee -a "$out/summary.txt"
  else
    log "$p probe BUILD FAILED: $(tail -3 "/tmp/die_${p}_probe_build.log")"
  fi
done

if [[ "$mode" == probes ]]; then  # the lab probes of bench/kernels alone: no rill build, no tests
  probes="${RILL_PROBES:-latency tile_stream read}"
  for p in $probes; do
    "$nvcc_bin" -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I src "bench/kernels/${p}_probe.cu" \
      -o "/tmp/${p}_probe" > "$out/build_${p}_probe.log" 2>&1 &
  done
  wait
  for p in $probes; do
    if [[ -x "/tmp/${p}_probe" ]]; then
      log "probe $p"
      timeout 120 "/tmp/${p}_probe" > "$out/${p}_probe.txt" 2>&1
      log "probe $p rc=$?"
      tail -25 "$out/${p}_probe.txt" | tee -a "$out/summary.txt"
    else
      log "probe $p BUILD FAILED"
      tail -5 "$out/build_${p}_probe.log" | tee -a "$out/summary.txt"
    fi
  done
  exit 0
fi

if [[ -n "$prebuilt" ]]; then  # the packed binaries in build-gpu's places; no build
  mkdir -p build-gpu/bench build-gpu/tests
  for b in rill bench/cuda_kernels_bench tests/rill_cuda_tests; do
    packed="build-bin/$(basename "$b").gz"
    [[ -f "$packed" ]] && gzip -dc "$packed" > "build-gpu/$b" && chmod +x "build-gpu/$b"
  done
  rm -f build-gpu/tests/rill_engine_tests  # (not packed: a stale one from an earlier build must not run)
  missing="$(ldd build-gpu/rill | grep 'not found')"
  [[ -n "$missing" ]] && { log "prebuilt rill lacks libraries: $missing"; exit 2; }
  log "prebuilt binaries in build-gpu (no build)"
else
  log "configure + build ($(nproc) cores)"
  # trace and leave-out run no tests: their main build needs only `rill` (it makes the model).
  targets="rill rill_cuda_tests rill_engine_tests cuda_kernels_bench"
  [[ "$mode" == trace || "$mode" == leave-out || "$mode" == footprint ]] && targets=rill
  # An A/B with no tests at all (RILL_SKIP_CTEST, no RILL_AB_TESTS) needs only `rill` too: the shortest call.
  [[ "$mode" == ab && -n "${RILL_SKIP_CTEST:-}" && -z "${RILL_AB_TESTS:-}" ]] && targets=rill
  if ! { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DRILL_CUDA=ON -DRILL_CUDA_ARCHITECTURES=90a \
           -DRILL_BUILD_BENCH=ON -DCMAKE_PREFIX_PATH=/tmp/pfx/usr -DICU_ROOT=/tmp/pfx/usr &&
         cmake --build build-gpu -j"$(nproc)" --target $targets ${RILL_EXTRA_TARGETS:-}; } > "$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    log "BUILD FAILED"
    exit 1
  fi
  log "build ok"
fi

# The GEMM timing test (CudaInvariance.DISABLED_GemmTiming) under one setting: gemm_timing LABEL CONFIGS [NAME=V ...]
# (RILL_GEMM_SHAPES="N:K,..." passes through); its lines to summary.txt prefixed with LABEL.
gemm_timing() {
  local label="$1" configs="$2"; shift 2
  env "$@" RILL_GEMM_CONFIGS="$configs" timeout 150 build-gpu/tests/rill_cuda_tests \
    --gtest_filter='CudaInvariance.DISABLED_GemmTiming' --gtest_also_run_disabled_tests 2>&1 | grep -E "^GEMM" |
    sed "s/^/  [$label] /" | tee -a "$out/summary.txt"
}
if [[ "$mode" == gemm-profile ]]; then  # the warpgroup GEMM against cuBLASLt (no model, no ctest)
  # Configurations side by side per (N, K) at M = 512 / 4096 — one N at several K separates a tile's fixed cost
  # from its per-k cost — then Nsight Compute sections of configuration 12 at 4096³ and of the cuBLASLt kernel
  # the autotuned path runs at 4096³.
  # RILL_PROFILE_TESTS: a gtest filter run first (short leash); RILL_PROFILE_ENVS="RILL_AB=default NAME=V ...": the
  # configurations timed under each setting (a setting's variables joined by commas); RILL_PROFILE_PREFILL="ARGS":
  # at the end, the model and `rill bench ARGS` alternating over those settings twice.
  if [[ -n "${RILL_PROFILE_TESTS:-}" ]]; then
    timeout "${RILL_PROFILE_TESTS_TIMEOUT:-200}" build-gpu/tests/rill_cuda_tests --gtest_filter="$RILL_PROFILE_TESTS" \
      > /tmp/profile_tests.log 2>&1
    tests_rc=$?
    log "tests rc=$tests_rc $(grep -cE '^\[       OK' /tmp/profile_tests.log) ok"
    grep -E "^\[  (PASSED|FAILED) |Failure|differing|Expected|Which is|seed" /tmp/profile_tests.log |
      head -30 | tee -a "$out/summary.txt"
    [[ $tests_rc -ne 0 ]] && { log "tests failed: nothing timed"; exit 1; }
  fi
  export RILL_GEMM_SHAPES="${RILL_GEMM_SHAPES:-4096:1024,4096:2048,4096:4096,4096:8192,24576:4096,6144:4096}"
  for setting in ${RILL_PROFILE_ENVS:-RILL_AB=default}; do
    read -ra envs <<< "${setting//,/ }"
    gemm_timing "$setting" "${RILL_PROFILE_CONFIGS:-12,14}" "${envs[@]}"
  done
  if [[ "${RILL_PROFILE_NCU:-1}" != 0 ]] && command -v ncu > /dev/null; then  # (RILL_PROFILE_NCU=0: none)
    sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis"
    sections+=" --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats"
    sections+=" --section SourceCounters --section LaunchStats --section Occupancy"
    # ColdTimer's warm-up launches first: the 3rd launch is a timed one.
    RILL_GEMM_CONFIGS=12 RILL_GEMM_SHAPES=4096:4096 RILL_GEMM_M=4096 timeout 180 ncu --clock-control none $sections \
      --kernel-name regex:gemm_wgmma_kernel --launch-skip 2 --launch-count 1 build-gpu/tests/rill_cuda_tests \
      --gtest_filter='CudaInvariance.DISABLED_GemmTiming' --gtest_also_run_disabled_tests > "$out/ncu_ours.txt" 2>&1
    log "ours: $(grep -cE 'Throughput|Stall|stall' "$out/ncu_ours.txt") lines"
    # The kernel bench's first GEMM (4096³) autotunes (≤ 6 algorithms × 6 launches) then times 23 launches.
    RILL_BENCH_GEMM_ONLY=1 timeout 180 ncu --clock-control none $sections --kernel-name regex:'nvjet|xmma|cutlass|sm90' \
      --launch-skip 45 --launch-count 1 build-gpu/bench/cuda_kernels_bench > "$out/ncu_cublas.txt" 2>&1
    log "cuBLASLt: $(grep -cE 'Throughput|Stall|stall' "$out/ncu_cublas.txt") lines"
    for f in ours cublas; do
      grep -E "^  [a-z_0-9]+.*\(|Duration|SM Frequency|Throughput|Hit Rate|Bank|Eligible|Issued Warp|No Eligible|Active Warps|Registers|Executed Ipc" \
        "$out/ncu_$f.txt" | head -60 | sed "s/^/  [$f] /" | tee -a "$out/summary.txt"
    done
  fi
  if [[ -n "${RILL_PROFILE_PREFILL:-}" ]]; then
    # The die's cuBLASLt 4096³ rate (the prefill bound's GEMM rate), then the model.
    RILL_BENCH_GEMM_ONLY=1 timeout 60 build-gpu/bench/cuda_kernels_bench 2>&1 | grep -E "HBM copy|GEMM square" |
      sed "s/^/  ceiling: /" | tee -a "$out/summary.txt"
    build-gpu/rill make-model --shape qwen3-8b --out /tmp/q8 > /dev/null 2>>"$out/bench_stderr.log" || log "make-model failed"
    for rep in 1 2; do
      for setting in ${RILL_PROFILE_ENVS:-RILL_AB=default}; do
        read -ra envs <<< "${setting//,/ }"
        env "${envs[@]}" timeout 150 build-gpu/rill bench --device cuda --model /tmp/q8 $RILL_PROFILE_PREFILL \
          2>>"$out/bench_stderr.log" | grep -E "^prefill_tokens_per_s" | sed "s/^/  [$setting] #$rep: /" |
          tee -a "$out/summary.txt"
      done
    done
  fi
  log "done (gemm-profile)"
  exit 0
fi
# A measurement build of `rill` in build-NAME with the CMake option OPTION on (exits on failure), then the model.
measurement_build() {  # NAME OPTION
  log "$1 build (-D$2=ON)"
  if ! { cmake -S . -B "build-$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRILL_CUDA=ON -DRILL_CUDA_ARCHITECTURES=90a \
           "-D$2=ON" -DCMAKE_PREFIX_PATH=/tmp/pfx/usr -DICU_ROOT=/tmp/pfx/usr &&
         cmake --build "build-$1" -j"$(nproc)" --target rill; } > "$out/build_$1.log" 2>&1; then
    tail -20 "$out/build_$1.log"
    log "$1 BUILD FAILED"
    exit 1
  fi
  build-gpu/rill make-model --shape qwen3-8b --out /tmp/q8 > /dev/null 2>>"$out/bench_stderr.log" || log "make-model failed"
}
if [[ "$mode" == trace ]]; then
  measurement_build trace RILL_PDL_TRACE
  for batch in ${RILL_TRACE_BATCH:-1}; do
    for ctx in ${RILL_TRACE_CTX:-512 8192}; do
      name="$ctx"
      [[ "$batch" != 1 ]] && name="${ctx}_b$batch"
      log "trace: batch-$batch decode at context $ctx"
      RILL_PDL_TRACE=/tmp/trace_$name.csv build-trace/rill bench --device cuda --model /tmp/q8 --prompt-len "$ctx" \
        --batch "$batch" --decode-tokens 64 2>>"$out/bench_stderr.log" | grep -E "decode_tokens" | tee -a "$out/summary.txt"
      python3 tools/pdl_trace_summary.py /tmp/trace_$name.csv --layer-window "${RILL_TRACE_WINDOW:-12}" --from 40 |
        tee "$out/trace_$name.txt" | head -30 >> "$out/summary.txt"
    done
  done
  exit 0
fi

if [[ "$mode" == footprint ]]; then  # how much code each kernel of a batch-1 decode step runs (no tests)
  # Raw logs go to OUTDIR as they are made, so that a run cut short still returns what it measured.
  "$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)" -sass build-gpu/rill > /tmp/sass.txt \
    2>>"$out/bench_stderr.log" || log "cuobjdump failed"
  python3 tools/code_footprint.py /dev/null /tmp/sass.txt > "$out/sass_sizes.txt"
  build-gpu/rill make-model --shape qwen3-8b --out /tmp/q8 > /dev/null 2>>"$out/bench_stderr.log" || log "make-model failed"
  metrics=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__warps_launched.sum
  stall=smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio  # (dropped if ncu refuses it)
  for ctx in ${RILL_FOOTPRINT_CTX:-512 8192}; do
    log "footprint: ncu over the batch-1 decode step's kernels at context $ctx"
    for m in "$metrics,$stall" "$metrics"; do
      # The step's GEMMs: the per-shape choice is timed at startup, which ncu's serialized launches distort
      # (run AC7 saw the streaming kernel for q/k/v and o, which the traced step does not run).
      RILL_DECODE_GEMM_CONFIG="${RILL_FOOTPRINT_GEMM_CONFIG:-18}" \
        timeout "${RILL_FOOTPRINT_TIMEOUT:-250}" ncu --clock-control none --graph-profiling node --metrics "$m" \
        --launch-skip 3000 --launch-count "${RILL_FOOTPRINT_LAUNCHES:-660}" build-gpu/rill bench --device cuda \
        --model /tmp/q8 --prompt-len "$ctx" --decode-tokens 16 > "$out/ncu_footprint_$ctx.log" 2>&1 &&
        grep -q "smsp__inst_executed" "$out/ncu_footprint_$ctx.log" && break
      log "ncu with $m failed: $(grep -m1 -iE 'error|unknown' "$out/ncu_footprint_$ctx.log")"
    done
    python3 tools/code_footprint.py "$out/ncu_footprint_$ctx.log" /tmp/sass.txt > "$out/footprint_$ctx.txt"
    head -25 "$out/footprint_$ctx.txt" | tee -a "$out/summary.txt"
  done
  exit 0
fi
if [[ "$mode" == leave-out ]]; then
  measurement_build leave RILL_LEAVE_OUT
  for ((rep = 1; rep <= ${RILL_AB_REPS:-2}; ++rep)); do
    for set in ${RILL_LEAVE_OUT_SETS:-none n r ra nra}; do
      RILL_LEAVE_OUT=$set timeout 150 build-leave/rill bench --device cuda --model /tmp/q8 \
        ${RILL_AB_ARGS:---prompt-len 512,8192 --decode-tokens 64} 2>>"$out/bench_stderr.log" | tee -a "$out/bench.log" |
        grep -E "decode_tokens_per_s" | sed "s/^/  [leave out $set] #$rep: /" | tee -a "$out/summary.txt"
    done
  done
  log "done (leave-out)"
  exit 0
fi
if [[ "$mode" == serve ]]; then log "serve phase: tests skipped (run by the dense phase)"; fi
if [[ "$mode" == prefill || "$mode" == batches || "$mode" == attn ]]; then  # the warpgroup kernels' own tests first, with a short leash (a hang costs little)
  timeout 200 build-gpu/tests/rill_cuda_tests --gtest_filter='CudaInvariance.Wgmma*:CudaInvariance.GemmConfigurationsAgree:CudaInvariance.MatmulRowAloneEqualsRowInBatches:CudaInvariance.Attention*:CudaAttention.*' \
    > "$out/wgmma_tests.log" 2>&1
  log "wgmma tests rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|differing|Expected|Which is|seed" "$out/wgmma_tests.log" | head -30 | tee -a "$out/summary.txt"
fi
# ab with RILL_AB_BASE_PATCH (a patch file in the tree, e.g. under .carry): a second `rill` built from this
# tree with that patch reversed — the code before a change — in the background while ctest runs.
base_pid=""
if [[ "$mode" == ab && -n "${RILL_AB_BASE_PATCH:-}" ]]; then
  log "base build: this tree with $RILL_AB_BASE_PATCH reversed (background)"
  ( rm -rf /tmp/base && mkdir -p /tmp/base &&
    tar -cf - --exclude='./build*' --exclude=./.git . | tar -xf - -C /tmp/base &&
    patch -R -p1 -d /tmp/base < "$RILL_AB_BASE_PATCH" &&
    cmake -S /tmp/base -B /tmp/base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DRILL_CUDA=ON \
      -DRILL_CUDA_ARCHITECTURES=90a -DCMAKE_PREFIX_PATH=/tmp/pfx/usr -DICU_ROOT=/tmp/pfx/usr &&
    cmake --build /tmp/base/build -j"$(nproc)" --target rill ) > "$out/build_base.log" 2>&1 &
  base_pid=$!
fi
ctest_rc=0
if [[ "$mode" == serve || -n "${RILL_SKIP_CTEST:-}" ]]; then
  log "ctest -L cuda skipped"
elif [[ -n "$prebuilt" ]]; then  # every test labelled cuda is this one binary's (tools/gpu_test_binary.sh)
  bash tools/gpu_test_binary.sh run "$out/tests" > /dev/null
  ctest_rc=$?
  grep -E "^\[==========\]|PASSED|FAILED" "$out/tests/summary.txt" | tee -a "$out/summary.txt"
  log "ctest -L cuda's test binary (prebuilt) rc=$ctest_rc"
else
  ctest --test-dir build-gpu -L cuda --output-on-failure --timeout "${RILL_CTEST_TIMEOUT:-600}" > "$out/ctest_cuda.log" 2>&1
  ctest_rc=$?
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest_cuda.log" | tail -15 | tee -a "$out/summary.txt"
  log "ctest -L cuda rc=$ctest_rc"
fi
# The engine's CUDA variants live in rill_engine_tests (skipped there without a GPU).
if [[ "$mode" != serve && -x build-gpu/tests/rill_engine_tests ]]; then
  build-gpu/tests/rill_engine_tests --gtest_filter='Cuda*' > "$out/engine_cuda.log" 2>&1
  engine_rc=$?
  grep -E "^\[  (PASSED|FAILED) |tests ran" "$out/engine_cuda.log" | tee -a "$out/summary.txt"
  log "engine Cuda* rc=$engine_rc"
  [[ $engine_rc -ne 0 ]] && ctest_rc=$engine_rc
fi
[[ "$mode" == quick ]] && exit $ctest_rc
if [[ "$mode" == serve ]]; then ctest_rc=0; fi

# rill bench's output with each decode figure next to its bounds on this die (the fingerprint's copy and
# read-stream rates at the top of summary.txt): bounds MODEL_DIR.
bounds() { python3 tools/decode_bound.py "$1" "$out/summary.txt"; }
bench() {  # label, args... (env RILL_BATCH_INVARIANT may be set by the caller)
  local label="$1"; shift
  local model=/tmp/q8 prev=""
  for a in "$@"; do [[ "$prev" == --model ]] && model="$a"; prev="$a"; done
  log "bench $label: rill bench $*"
  build-gpu/rill bench --device cuda "$@" 2>>"$out/bench_stderr.log" | tee -a "$out/bench.log" | bounds "$model" |
    grep -E "^model|tokens_per_s" | sed "s/^/  $label: /" | tee -a "$out/summary.txt"
}
serve() {  # label, args...
  local label="$1"; shift
  log "bench-serve $label: rill bench-serve $*"
  build-gpu/rill bench-serve --device cuda "$@" 2>>"$out/bench_stderr.log" | tee -a "$out/serve.log" |
    grep -E "^device|output_tokens|ttft|itl|prefix_hit|turn|state_snap|preempt" | sed "s/^/  $label: /" | tee -a "$out/summary.txt"
}
# The GPU's clocks, power and temperature while the benchmarks run (nvidia-smi every 100 ms): machines
# of the kind decode the same code up to ~2% apart, and a lower SM clock under a power or thermal cap
# would show here. clocks_start before the timed runs, clocks_stop LABEL after: medians and ranges.
clocks_pid=""
clocks_start() {  # [interval ms, default 100]
  local fields=clocks.sm,clocks.mem,power.draw,temperature.gpu reasons
  for reasons in clocks_event_reasons.active clocks_throttle_reasons.active; do  # (the newer name first)
    nvidia-smi --query-gpu="$reasons" --format=csv,noheader > /dev/null 2>&1 && { fields+=",$reasons"; break; }
  done
  nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits -lms "${1:-100}" > /tmp/clocks.csv 2>/dev/null &
  clocks_pid=$!
}
clocks_stop() {  # label
  [[ -n "$clocks_pid" ]] || return 0
  kill "$clocks_pid" 2>/dev/null; wait "$clocks_pid" 2>/dev/null; clocks_pid=""
  nvidia-smi --query-gpu=power.limit,clocks.applications.graphics,clocks.applications.memory \
    --format=csv,noheader | sed "s/^/  $1: power limit, application clocks: /" | tee -a "$out/summary.txt"
  python3 tools/clocks_summary.py "$1" /tmp/clocks.csv | tee -a "$out/summary.txt"
}
dense=0; serving=0
case "$mode" in
  dense) dense=1 ;; serve) serving=1 ;; full) dense=1; serving=1 ;;
  lite|decode|attn-decode|sweep|prefill|final|figures|batches|profile|attn|trace|ab|leave-out|serve-ab|power) ;;
  *) log "unknown mode $mode"; exit 2 ;;
esac
log "make-model qwen3-8b"
build-gpu/rill make-model --shape qwen3-8b --out /tmp/q8 > /dev/null 2>>"$out/bench_stderr.log" || log "make-model failed"
ncu_breakdown() {  # Where a batch-1 decode step's time goes: ~30 layers of kernels timed alone
  if command -v ncu > /dev/null; then
    log "per-kernel decode breakdown (ncu, invariant mode)"
    timeout 150 ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --launch-skip 3000 \
      --launch-count 400 build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 512 --decode-tokens 4 \
      > /tmp/ncu.log 2>&1
    python3 tools/ncu_summary.py /tmp/ncu.log | tee -a "$out/summary.txt"
  fi
}
ncu_attention() {  # the attention kernels of prefill and batch-1 decode at context $1, each alone (grouped by grid)
  if command -v ncu > /dev/null; then
    log "attention kernels at context $1 (ncu, invariant mode)"
    timeout 200 ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --kernel-name regex:attention \
      --launch-count 700 build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len "$1" --decode-tokens 4 \
      > /tmp/ncu_attn_ctx.log 2>&1
    python3 tools/ncu_summary.py /tmp/ncu_attn_ctx.log | tee -a "$out/summary.txt"
  fi
}
ncu_attention_sections() {  # the batch-1 decode attention kernel (split schedule) at context $1: Nsight Compute sections
  if command -v ncu > /dev/null; then
    log "decode attention kernel at context $1 (ncu sections)"
    timeout 150 ncu --clock-control none --graph-profiling node --kernel-name regex:attention_kernel --launch-skip 110 \
      --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SchedulerStats build-gpu/rill bench --device cuda --model /tmp/q8 \
      --prompt-len "$1" --decode-tokens 4 > "$out/ncu_attn_decode.txt" 2>&1
    grep -E "attention_kernel|Duration|Throughput|Stall|Warp Cycles|Active Warps|Occupancy|Registers|Shared Memory|Block Limit|Issued|Eligible|Bandwidth" \
      "$out/ncu_attn_decode.txt" | head -60 | tee -a "$out/summary.txt"
  fi
}
if [[ "$mode" == sweep ]]; then  # batch-1 decode under each decode-GEMM configuration and split policy
  RILL_GEMM_TIMING_MAX_M=1 timeout 150 build-gpu/tests/rill_cuda_tests --gtest_filter='CudaInvariance.DISABLED_GemmTiming' \
    --gtest_also_run_disabled_tests 2>&1 | grep -E "^GEMM" | tee -a "$out/summary.txt"
  if [[ -n "${RILL_SWEEP_TIMING_PREFETCH:-}" ]]; then
    RILL_GEMM_L2_PREFETCH=$RILL_SWEEP_TIMING_PREFETCH RILL_GEMM_TIMING_MAX_M=1 timeout 150 build-gpu/tests/rill_cuda_tests \
      --gtest_filter='CudaInvariance.DISABLED_GemmTiming' --gtest_also_run_disabled_tests 2>&1 | grep -E "^GEMM decode config 1 " |
      sed "s/^/L2 prefetch $RILL_SWEEP_TIMING_PREFETCH: /" | tee -a "$out/summary.txt"
  fi
  for c in ${RILL_SWEEP_CONFIGS:-1 5 7 8 9}; do RILL_DECODE_GEMM_CONFIG=$c bench "b1 config $c" --model /tmp/q8 --prompt-len 512 --decode-tokens 64; done
  for p in ${RILL_SWEEP_PREFETCH:-}; do RILL_GEMM_L2_PREFETCH=$p bench "b1 L2 prefetch $p" --model /tmp/q8 --prompt-len 512 --decode-tokens 64; done
  for s in ${RILL_SWEEP_SPLITS:-}; do RILL_GEMM_SPLIT_CTAS=$s bench "b1 split-ctas $s" --model /tmp/q8 --prompt-len 512 --decode-tokens 64; done
  bench "b1 default" --model /tmp/q8 --prompt-len 512,8192 --decode-tokens 64
  log "done (sweep)"
  exit $ctest_rc
fi
if [[ "$mode" == attn-decode ]]; then  # batch-1 decode at 512 / 8192 / 16384 (and the attention kernels at RILL_BREAKDOWN_CTX)
  bench "invariant b1" --model /tmp/q8 --prompt-len 512,8192,16384 --decode-tokens 64
  [[ -n "${RILL_BREAKDOWN_CTX:-}" ]] && ncu_attention "$RILL_BREAKDOWN_CTX"
  log "done (attn-decode)"
  exit $ctest_rc
fi
if [[ "$mode" == decode ]]; then
  if [[ -n "${RILL_PROBE:-}" ]]; then  # the decode GEMM configurations under Nsight Compute, and SASS
    timeout 120 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --section LaunchStats --kernel-name regex:'gemm_(stream_)?kernel' \
      build-gpu/tests/rill_cuda_tests --gtest_filter='CudaInvariance.DISABLED_GemmDecodeProfile' \
      --gtest_also_run_disabled_tests > "$out/ncu_gemm.txt" 2>&1
    cuobjdump -sass build-gpu/tests/rill_cuda_tests 2>/dev/null | awk '/Function : .*gemm_stream_kernelILb0ELi4ELi2E/{f=1} f{print} f&&/EXIT/{n++} f&&n>=2{exit}' > "$out/sass.txt"
    log "probe: $(wc -l < "$out/ncu_gemm.txt") ncu lines, $(wc -l < "$out/sass.txt") SASS lines"
  fi
  # Read patterns of a decode GEMM's weight stream against the copy rate (bench/kernels/read_probe.cu).
  if [[ -n "${RILL_READ_PROBE:-}" ]] && "$nvcc_bin" -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I src bench/kernels/read_probe.cu -o /tmp/read_probe \
       > /tmp/read_probe_build.log 2>&1; then
    timeout 60 /tmp/read_probe 2>&1 | sed "s/^/  read: /" | tee -a "$out/summary.txt"
  elif [[ -n "${RILL_READ_PROBE:-}" ]]; then
    tail -5 /tmp/read_probe_build.log | tee -a "$out/summary.txt"
  fi
  RILL_GEMM_TIMING_MAX_M=1 timeout 150 build-gpu/tests/rill_cuda_tests --gtest_filter='CudaInvariance.DISABLED_GemmTiming' \
    --gtest_also_run_disabled_tests 2>&1 | grep -E "^GEMM" | tee -a "$out/summary.txt"
  bench "invariant b1" --model /tmp/q8 --prompt-len 512,8192,16384 --decode-tokens 64
  for c in ${RILL_DECODE_CONFIGS:-7 8 18 19}; do
    RILL_DECODE_GEMM_CONFIG=$c bench "b1 config $c" --model /tmp/q8 --prompt-len 512 --decode-tokens 64
  done
  bench "invariant bN" --model /tmp/q8 --prompt-len 512 --batch 4,8,16,64,256 --decode-tokens 32
  RILL_BATCH_INVARIANT=0 bench "autotuned b1" --model /tmp/q8 --prompt-len 512 --decode-tokens 64
  [[ -n "${RILL_BREAKDOWN:-}" ]] && ncu_breakdown
  [[ -n "${RILL_BREAKDOWN_CTX:-}" ]] && ncu_attention "$RILL_BREAKDOWN_CTX"
  log "done (decode)"
  exit $ctest_rc
fi
if [[ "$mode" == prefill ]]; then  # the GEMM for M > 16 per configuration, prefill and batched decode
  RILL_GEMM_CONFIGS=1 timeout 150 build-gpu/tests/rill_cuda_tests --gtest_filter='CudaInvariance.DISABLED_GemmTiming' \
    --gtest_also_run_disabled_tests 2>&1 | grep -E "^GEMM" | tee -a "$out/summary.txt"
  bench "invariant" --model /tmp/q8 --prompt-len 512,4096,16384 --decode-tokens 16
  RILL_GEMM_WIDE_TILE=1 bench "invariant 128x192 tiles" --model /tmp/q8 --prompt-len 512,4096 --decode-tokens 16
  RILL_ATTENTION_WGMMA=0 bench "invariant mma.sync attention" --model /tmp/q8 --prompt-len 4096,16384 --decode-tokens 16
  [[ -n "${RILL_PROBE:-}" ]] && RILL_GEMM_WGMMA=0 bench "invariant no-wgmma" --model /tmp/q8 --prompt-len 4096 --decode-tokens 16
  bench "invariant bN" --model /tmp/q8 --prompt-len 512 --batch 1,16,64,256 --decode-tokens 32
  [[ -n "${RILL_BREAKDOWN_CTX:-}" ]] && ncu_attention "$RILL_BREAKDOWN_CTX"
  [[ -n "${RILL_ATTN_PROFILE:-}" ]] && ncu_attention_sections "$RILL_ATTN_PROFILE"
  if [[ -n "${RILL_PROBE:-}" ]] && command -v ncu > /dev/null; then  # where a 4096-token prefill's time goes
    log "per-kernel prefill breakdown (ncu, one 4096-token prompt)"
    timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 600 \
      build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 4096 --decode-tokens 1 > /tmp/ncu_prefill.log 2>&1
    python3 tools/ncu_summary.py /tmp/ncu_prefill.log | tee -a "$out/summary.txt"
  fi
  log "done (prefill)"
  exit $ctest_rc
fi
if [[ "$mode" == profile ]]; then  # Nsight Compute sections of the prefill GEMM and attention, and per-kernel times
  sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
  # The 2nd launch of configuration 12 at M = 4096 on the first shape (q/k/v, N = 6144, K = 4096), after 6 warpgroup
  # configurations x 16 launches at M = 512 and 16 of configuration 11.
  RILL_GEMM_CONFIGS=1 timeout 150 ncu --clock-control none $sections --section MemoryWorkloadAnalysis_Tables \
    --section InstructionStats --kernel-name regex:gemm_wgmma_kernel --launch-skip 113 \
    --launch-count 1 build-gpu/tests/rill_cuda_tests --gtest_filter='CudaInvariance.DISABLED_GemmTiming' \
    --gtest_also_run_disabled_tests > "$out/ncu_gemm.txt" 2>&1
  log "gemm profile: $(grep -cE 'Throughput|Stall' "$out/ncu_gemm.txt") lines"
  timeout 120 ncu --clock-control none $sections --kernel-name regex:attention_wgmma_kernel --launch-skip 40 \
    --launch-count 1 \
    build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 4096 --decode-tokens 1 > "$out/ncu_attn.txt" 2>&1
  log "attention profile: $(grep -cE 'Throughput|Stall' "$out/ncu_attn.txt") lines"
  log "per-kernel prefill breakdown (ncu, two 4096-token prompts: untimed then timed)"
  timeout 170 ncu --clock-control none --metrics gpu__time_duration.sum --launch-count 800 \
    build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 4096 --decode-tokens 1 > /tmp/ncu_prefill.log 2>&1
  python3 tools/ncu_summary.py /tmp/ncu_prefill.log | tee -a "$out/summary.txt"
  ncu_breakdown
  log "done (profile)"
  exit $ctest_rc
fi
if [[ "$mode" == attn ]]; then  # prefill with the warpgroup and the mma.sync attention kernels
  if [[ -n "${RILL_SASS:-}" ]]; then  # the warpgroup attention kernel's machine code
    cuobjdump -sass build-gpu/src/CMakeFiles/rill_kernels.dir/kernels/cuda/attention_wgmma.cu.o > "$out/sass_attn.txt" 2>&1
    log "SASS: $(wc -l < "$out/sass_attn.txt") lines"
    rm -f "$out/build.log"  # (the build passed; keeps the folder within 8 files with RILL_PROBE)
  fi
  bench "invariant" --model /tmp/q8 --prompt-len 512,4096,16384 --decode-tokens 16
  RILL_ATTENTION_WGMMA=0 bench "invariant mma.sync attention" --model /tmp/q8 --prompt-len 4096,16384 --decode-tokens 16
  if [[ -n "${RILL_PROBE:-}" ]]; then  # the warpgroup attention kernel of a 4096-token prefill under Nsight Compute
    timeout 120 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section Occupancy --section LaunchStats --kernel-name regex:attention_wgmma_kernel \
      --launch-skip 40 --launch-count 1 build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 4096 \
      --decode-tokens 1 > "$out/ncu_attn.txt" 2>&1
    log "attention profile: $(grep -E 'Duration|Registers Per|Executed Ipc A' "$out/ncu_attn.txt" | tr -s ' ' | tr '\n' ';')"
    # Stall reasons, tensor-pipe use and instruction counts of the attention and GEMM kernels.
    stalls="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg"
    timeout 90 ncu --clock-control none --metrics "$stalls" --kernel-name regex:attention_wgmma_kernel --launch-skip 40 \
      --launch-count 1 build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 4096 --decode-tokens 1 >> "$out/ncu_attn.txt" 2>&1
    RILL_GEMM_CONFIGS=1 timeout 90 ncu --clock-control none --metrics "$stalls" --kernel-name regex:gemm_wgmma_kernel --launch-skip 81 \
      --launch-count 1 build-gpu/tests/rill_cuda_tests --gtest_filter='CudaInvariance.DISABLED_GemmTiming' \
      --gtest_also_run_disabled_tests >> "$out/ncu_attn.txt" 2>&1
  fi
  for keys in ${RILL_SPAN_SWEEP:-}; do  # the invariant attention's span (part of the arithmetic) at head_dim 128
    RILL_ATTENTION_SPAN_KEYS=$keys bench "span $keys" --model /tmp/q8 --prompt-len 512,4096,16384 --decode-tokens 32
  done
  log "done (attn)"
  exit $ctest_rc
fi
if [[ "$mode" == batches ]]; then  # decode batches 32-256 (the GEMMs with few output tiles)
  bench "invariant bN" --model /tmp/q8 --prompt-len 512 --batch 1,32,64,128,256 --decode-tokens 32
  log "done (batches)"
  exit $ctest_rc
fi
if [[ "$mode" == ab ]]; then  # settings measured side by side: RILL_AB_ENVS × RILL_AB_REPS, alternating
  # RILL_AB_TESTS: a gtest filter run under each setting first; RILL_AB_ARGS: rill bench's arguments.
  reps="${RILL_AB_REPS:-2}"
  binaries="new=build-gpu/rill"  # with RILL_AB_BASE_PATCH: each setting on the base build too
  if [[ -n "$base_pid" ]]; then
    if wait "$base_pid"; then binaries="base=/tmp/base/build/rill new=build-gpu/rill"; log "base build ok"
    else tail -20 "$out/build_base.log" | tee -a "$out/summary.txt"; log "base BUILD FAILED"; fi
  fi
  for setting in ${RILL_AB_ENVS:?ab mode: RILL_AB_ENVS=\"A=1 A=2 ...\" (one NAME=VALUE a setting)}; do
    if [[ -n "${RILL_AB_TESTS:-}" && "$setting" != --* ]]; then
      read -ra envs <<< "${setting//,/ }"
      # One log for every setting's tests (a file a setting overflowed the 8 files a call brings back).
      env "${envs[@]}" timeout 200 build-gpu/tests/rill_cuda_tests --gtest_filter="$RILL_AB_TESTS" \
        > /tmp/ab_tests.log 2>&1
      rc=$?
      { echo "==== [$setting] rc=$rc"; cat /tmp/ab_tests.log; } >> "$out/ab_tests.log"
      log "ab tests [$setting] rc=$rc $(grep -cE '^\[       OK' /tmp/ab_tests.log) ok"
    fi
  done
  # RILL_AB_GEMM=CONFIGS: the GEMM timing test (RILL_GEMM_CONFIGS=CONFIGS; RILL_GEMM_SHAPES="N:K,..." if set) under
  # each setting, alternating twice.
  if [[ -n "${RILL_AB_GEMM:-}" ]]; then
    for rep in 1 2; do
      for setting in $RILL_AB_ENVS; do
        [[ "$setting" == --* ]] && continue
        read -ra envs <<< "${setting//,/ }"
        gemm_timing "$setting #$rep" "$RILL_AB_GEMM" "${envs[@]}"
      done
    done
  fi
  clocks_start
  for ((rep = 1; rep <= reps; ++rep)); do
    for setting in $RILL_AB_ENVS; do
      # A setting starting with "--" is a rill bench flag rather than an environment variable.
      flag=""; read -ra envs <<< "${setting//,/ }"
      [[ "$setting" == --* ]] && flag="$setting" envs=(RILL_AB_FLAG=1)
      for bin in $binaries; do
        label="$setting"; [[ "$binaries" == *" "* ]] && label="${bin%%=*} $setting"
        env "${envs[@]}" timeout 150 "${bin#*=}" bench --device cuda --model /tmp/q8 \
          ${RILL_AB_ARGS:---prompt-len 512,8192 --decode-tokens 64} $flag 2>>"$out/bench_stderr.log" |
          tee -a "$out/bench.log" | bounds /tmp/q8 | grep -E "^prefill_tokens_per_s|decode_tokens_per_s|host_us" |
          sed "s/^/  [$label] #$rep: /" |
          tee -a "$out/summary.txt"
      done
    done
  done
  clocks_stop "clocks (rill bench)"
  log "done (ab)"
  exit $ctest_rc
fi
if [[ "$mode" == serve-ab ]]; then  # the serving engine with and without overlapped steps, alternating
  model=/tmp/q8
  if [[ -n "${RILL_SERVE_SHAPE:-}" ]]; then  # another shape instead of the 8B's figures
    rm -rf /tmp/q8
    model=/tmp/serve-model
    log "make-model $RILL_SERVE_SHAPE"
    build-gpu/rill make-model --shape "$RILL_SERVE_SHAPE" --out $model > /dev/null 2>>"$out/bench_stderr.log" ||
      log "make-model failed"
  else
    bench "invariant b1" --model /tmp/q8 --prompt-len 512,8192 --decode-tokens 64
  fi
  for ((rep = 1; rep <= ${RILL_AB_REPS:-2}; ++rep)); do
    for flag in "" --sync-steps; do
      serve "${flag:-overlapped} #$rep" --model $model \
        --cells "${RILL_SERVE_CELLS:-1:1000:1000,16:1000:1000,64:1000:1000,256:512:128,64:512:128:0.9}" $flag
    done
  done
  log "done (serve-ab)"
  exit $ctest_rc
fi
if [[ "$mode" == power ]]; then  # the clocks while decode alone runs: long decodes, sampled every 20 ms
  for args in "--prompt-len 512 --decode-tokens 64" "--prompt-len 512 --decode-tokens 3000" \
              "--prompt-len 8192 --decode-tokens 3000" "--prompt-len 512 --batch 64 --decode-tokens 1000"; do
    clocks_start 20
    bench "$args" --model /tmp/q8 $args
    clocks_stop "clocks ($args)"
  done
  log "done (power)"
  exit $ctest_rc
fi
if [[ "$mode" == figures ]]; then  # RESULTS.md's dense-model figures, default mode, with host times
  log "kernel bench: the ceilings (HBM copy, cuBLASLt GEMM) first"
  timeout 60 build-gpu/bench/cuda_kernels_bench > "$out/kernels_bench.log" 2>&1
  grep -E "HBM copy|GEMM (square|qkv|o_proj|gate_up|down) M=4096" "$out/kernels_bench.log" |
    sed "s/^/  ceiling: /" | tee -a "$out/summary.txt"
  clocks_start
  # RILL_FIGURES_AB="NAME=V[,NAME2=V2]": the second pass becomes batch-1 decode at 512 / 8,192 keys alternating
  # the defaults and that setting, twice (a change measured on the same die as the figures).
  for rep in 1 2; do
    [[ $rep == 2 && -n "${RILL_FIGURES_AB:-}" ]] && break
    timeout 150 build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 512,4096,8192,16384 --decode-tokens 64 \
      --host-times 2>>"$out/bench_stderr.log" | tee -a "$out/bench.log" | bounds /tmp/q8 |
      grep -E "^model|tokens_per_s|host_us" | sed "s/^/  invariant #$rep: /" | tee -a "$out/summary.txt"
  done
  if [[ -n "${RILL_FIGURES_AB:-}" ]]; then
    for rep in 1 2; do
      for setting in RILL_AB=default "$RILL_FIGURES_AB"; do
        read -ra envs <<< "${setting//,/ }"
        env "${envs[@]}" timeout 100 build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 512,8192 \
          --decode-tokens 64 2>>"$out/bench_stderr.log" | tee -a "$out/bench.log" | bounds /tmp/q8 |
          grep -E "decode_tokens_per_s" | sed "s/^/  [$setting] #$rep: /" | tee -a "$out/summary.txt"
      done
    done
  fi
  timeout 150 build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 512 --batch 16,64,128,256 \
    --decode-tokens 32 --host-times 2>>"$out/bench_stderr.log" | tee -a "$out/bench.log" | bounds /tmp/q8 |
    grep -E "^model|decode_tokens_per_s|host_us" | sed "s/^/  invariant bN: /" | tee -a "$out/summary.txt"
  clocks_stop "clocks (rill bench)"
  log "done (figures)"
  exit $ctest_rc
fi
if [[ "$mode" == final ]]; then  # the figures of bench/RESULTS.md in one run: ceilings, GEMMs, rill bench
  log "kernel bench: the ceilings (HBM copy, cuBLASLt GEMM) first"
  timeout 60 build-gpu/bench/cuda_kernels_bench > "$out/kernels_bench.log" 2>&1
  grep -E "HBM copy|GEMM (square|qkv|o_proj|gate_up|down) M=4096" "$out/kernels_bench.log" | sed "s/^/  ceiling: /" | tee -a "$out/summary.txt"
  RILL_GEMM_CONFIGS=1 timeout 150 build-gpu/tests/rill_cuda_tests --gtest_filter='CudaInvariance.DISABLED_GemmTiming' \
    --gtest_also_run_disabled_tests 2>&1 | grep -E "^GEMM config (2|12)" | tee -a "$out/summary.txt"
  bench "invariant" --model /tmp/q8 --prompt-len 512,4096,8192,16384 --decode-tokens 64
  bench "invariant bN" --model /tmp/q8 --prompt-len 512 --batch 16,64,256 --decode-tokens 32
  RILL_BATCH_INVARIANT=0 bench "autotuned" --model /tmp/q8 --prompt-len 512,4096,8192 --decode-tokens 64
  [[ -z "${RILL_SKIP_NCU:-}" ]] && ncu_breakdown  # where a batch-1 decode step's time goes
  [[ -n "${RILL_BREAKDOWN_CTX:-}" ]] && ncu_attention "$RILL_BREAKDOWN_CTX"
  [[ -n "${RILL_ATTN_PROFILE:-}" ]] && ncu_attention_sections "$RILL_ATTN_PROFILE"
  if [[ -n "${RILL_BREAKDOWN64:-}" ]] && command -v ncu > /dev/null; then  # where a batch-64 decode step's time goes (invariant mode)
    log "per-kernel decode breakdown at batch 64 (ncu, ~10 layers)"
    timeout 90 ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --launch-skip 3000 \
      --launch-count 150 build-gpu/rill bench --device cuda --model /tmp/q8 --prompt-len 512 --batch 64 --decode-tokens 4 \
      > /tmp/ncu64.log 2>&1
    python3 tools/ncu_summary.py /tmp/ncu64.log | head -16 | tee -a "$out/summary.txt"
  fi
  log "done (final)"
  exit $ctest_rc
fi
if [[ "$mode" == lite ]]; then
  bench "invariant" --model /tmp/q8 --prompt-len 512,4096 --decode-tokens 64
  RILL_BATCH_INVARIANT=0 bench "autotuned" --model /tmp/q8 --prompt-len 512,4096 --decode-tokens 64
  log "done (lite)"
  exit $ctest_rc
fi
if [[ $dense == 1 ]]; then
  # The machine's ceilings in this same run: HBM copy bandwidth and the bf16 GEMM rate (first
  # lines of the kernel benchmark), then its per-kernel figures; the invariant GEMM per shape.
  log "kernel bench (ceilings first)"
  timeout 180 build-gpu/bench/cuda_kernels_bench > "$out/kernels_bench.log" 2>&1
  grep -E "HBM copy|GEMM M=4096 .*4096x4096|cuBLASLt 4096" "$out/kernels_bench.log" | head -3 | sed "s/^/  ceiling: /" | tee -a "$out/summary.txt"
  timeout 150 build-gpu/tests/rill_cuda_tests --gtest_filter='CudaInvariance.DISABLED_GemmTiming' \
    --gtest_also_run_disabled_tests 2>&1 | grep -E "^GEMM" >> "$out/kernels_bench.log"
  # #4: batch-1 decode at 512/4096/8192/16384 context and prefill of those prompts; decode at
  # batch 16/64/256. Both matmul modes: batch-invariant (the default) and autotuned.
  bench "invariant b1" --model /tmp/q8 --prompt-len 512,4096,8192,16384 --decode-tokens 64
  RILL_BATCH_INVARIANT=0 bench "autotuned b1" --model /tmp/q8 --prompt-len 512,4096,8192,16384 --decode-tokens 64
  bench "invariant bN" --model /tmp/q8 --prompt-len 512 --batch 16,64,256 --decode-tokens 32
  RILL_BATCH_INVARIANT=0 bench "autotuned bN" --model /tmp/q8 --prompt-len 512 --batch 16,64,256 --decode-tokens 32
  # Where a batch-1 decode step's time goes: every kernel of ~30 layers timed alone by Nsight
  # Compute (the graph's nodes one by one), summed per kernel and grid.
  ncu_breakdown
fi
if [[ $serving == 1 ]]; then
  # #5: the serving engine (default, batch-invariant mode): 1000/1000 and 512/128 at 1/16/64/256
  # clients, 512/128 with a 90% shared prefix, and the aggregate 128 x (512 + 128) cell.
  serve "invariant" --model /tmp/q8 --cells 128:512:128,1:1000:1000,16:1000:1000,64:1000:1000,256:1000:1000,1:512:128,16:512:128,64:512:128,256:512:128,1:512:128:0.9,16:512:128:0.9,64:512:128:0.9,256:512:128:0.9
  RILL_BATCH_INVARIANT=0 serve "autotuned" --model /tmp/q8 --cells 128:512:128
  rm -rf /tmp/q8
  # #7: a Qwen3.5-9B-shaped model.
  log "make-model qwen3.5-9b"
  build-gpu/rill make-model --shape qwen3.5-9b --out /tmp/q35 > /dev/null 2>>"$out/bench_stderr.log" || log "make-model qwen3.5-9b failed"
  bench "qwen3.5-9b" --model /tmp/q35 --prompt-len 512,4096,32768 --decode-tokens 32
  serve "qwen3.5-9b multiturn" --model /tmp/q35 --scenario multiturn --context 50000 --extend 200 --max-tokens 16 --concurrency 1
fi
log "done"
exit $ctest_rc
