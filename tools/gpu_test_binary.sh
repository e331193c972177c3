#!/usr/bin/env bash
# tools/gpu_test_binary.sh prepare BUILD_DIR | run OUTDIR — `ctest -L cuda`'s tests on the GPU machine with nothing
# to build there: for a call with too little device time left to build (gpu_run.sh's `quick` builds first).
#   prepare (here, after a build of the commit, e.g. a clean-clone CI run's build/): copies BUILD_DIR's
#     tests/rill_cuda_tests (every test labelled `cuda` is this one binary's) into build-bin/ (git-ignored; carry
#     it: ["build-bin"]), stripped and gzipped (~9 MB, so it fits in a call beside .carry and the tree), with the
#     Debian runtime packages it links that the GPU machine lacks (Highway, spdlog 1.10, fmt 9) and the stamp of
#     tools/gpu_stamp.sh.
#   run (there): unpacks those packages, points the binary's built-in source path (its test fixtures) at this tree,
#     runs the binary directly (RILL_BIN_TIMEOUT seconds, default 240) and writes its log and a summary to OUTDIR.
#     RILL_REQUIRE_GPU=TEXT: stop at once (exit 3) unless the GPU's name contains TEXT. GTEST_FILTER and
#     GTEST_ALSO_RUN_DISABLED_TESTS=1 pass through to the binary (e.g. one of the DISABLED_ timing tests).
#   prepare also packs BUILD_DIR's `rill` and bench/cuda_kernels_bench where they exist, with the runtime packages
#     `rill` links beyond those (ICU 72, PCRE2, xxhash): `RILL_PREBUILT=1 tools/gpu_run.sh OUT MODE` there then runs
#     MODE's benchmarks on these binaries instead of building (carry ["build-bin"] alone: ~40 MB with the tree).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case "${1:-}" in
  prepare)
    build="${2:?usage: tools/gpu_test_binary.sh prepare BUILD_DIR}"
    set -e
    mkdir -p build-bin/debs
    rm -f build-bin/rill_cuda_tests
    cp "$build/tests/rill_cuda_tests" build-bin/ && strip build-bin/rill_cuda_tests && gzip -9f build-bin/rill_cuda_tests
    # The binary's RILL_SOURCE_DIR: `run` links it to the tree it is given there.
    sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" > build-bin/SOURCE_DIR
    grep -q . build-bin/SOURCE_DIR
    (cd build-bin/debs && for p in libhwy1 libspdlog1.10 libfmt9; do
       compgen -G "${p}_*.deb" > /dev/null || apt-get download "$p"; done)
    # The benchmark binaries, for RILL_PREBUILT=1 tools/gpu_run.sh (no build on the GPU machine).
    rm -f build-bin/rill.gz build-bin/cuda_kernels_bench.gz
    for b in rill bench/cuda_kernels_bench; do
      [[ -x "$build/$b" ]] || continue
      name="$(basename "$b")"
      cp "$build/$b" "/tmp/$name.prebuilt" && strip "/tmp/$name.prebuilt"
      gzip -9c "/tmp/$name.prebuilt" > "build-bin/$name.gz" && rm -f "/tmp/$name.prebuilt"
    done
    if [[ -f build-bin/rill.gz ]]; then
      (cd build-bin/debs && for p in libicu72 libpcre2-8-0 libxxhash0; do
         compgen -G "${p}_*.deb" > /dev/null || apt-get download "$p"; done)
    fi
    tools/gpu_stamp.sh && cp .carry/STAMP build-bin/STAMP
    # The commit the binary was built from, which need not be this tree's.
    echo "binary built from $(git -C "$(cat build-bin/SOURCE_DIR)" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
      >> build-bin/STAMP
    du -sh build-bin ;;
  run)
    out="${2:?usage: tools/gpu_test_binary.sh run OUTDIR}"; mkdir -p "$out"
    gpu="$(nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "gpu: ${gpu:-none found}" | tee "$out/summary.txt"
    if [[ -n "${RILL_REQUIRE_GPU:-}" && "$gpu" != *"$RILL_REQUIRE_GPU"* ]]; then
      echo "RILL_REQUIRE_GPU=$RILL_REQUIRE_GPU: nothing run" | tee -a "$out/summary.txt"; exit 3
    fi
    mkdir -p /tmp/pfx; for f in build-bin/debs/*.deb; do dpkg -x "$f" /tmp/pfx; done
    bin=/tmp/rill_cuda_tests; gzip -dc build-bin/rill_cuda_tests.gz > "$bin" && chmod +x "$bin" || exit 2
    export LD_LIBRARY_PATH=/tmp/pfx/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    src="$(cat build-bin/SOURCE_DIR)"
    if [[ "$src" != "$PWD" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
    sed 's/^/stamp: /' build-bin/STAMP | tee -a "$out/summary.txt"
    ldd "$bin" | grep "not found" | tee -a "$out/summary.txt"
    start=$(date +%s)
    timeout "${RILL_BIN_TIMEOUT:-240}" "$bin" > "$out/cuda_tests.log" 2>&1; rc=$?
    echo "rill_cuda_tests rc=$rc in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    grep -E "^\[==========\]|^\[  (PASSED  |SKIPPED )\] [0-9]|^\[  FAILED  \]|DISABLED TEST" "$out/cuda_tests.log" |
      tee -a "$out/summary.txt"
    exit $rc ;;
  *) echo "usage: tools/gpu_test_binary.sh prepare BUILD_DIR | run OUTDIR" >&2; exit 2 ;;
esac
