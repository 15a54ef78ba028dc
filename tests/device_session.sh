#!/bin/sh
# tests/device_session.sh OUT PART — what a GPU machine verifies, with every
# step's log and time under OUT (the device tool brings OUT back).
#   PART=test   build, then make test-gpu (GPU tests must run, the whole check
#               matrix, planted-bug twins, sanitizers, probe validation, trainer)
#   PART=unit   the first half of test-gpu alone: every test binary, GPU required
#   PART=checks the second half alone: tests/gpu_checks.sh (the check matrix,
#               twins, sanitizers); the two halves each fit a 10-minute call
#   PART=bench  build, then make bench
# Builds for sm_90 only into /tmp/b-session (kept while the machine is warm).
set -u
out=$1; part=$2
build=/tmp/b-session
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader >"$out/device.txt" 2>&1
nvcc --version | tail -1 >>"$out/device.txt"
git rev-parse HEAD >>"$out/device.txt" 2>/dev/null
cat "$out/device.txt"
t0=$(date +%s)
if ! make BUILD=$build NVCC_ARCH=-arch=sm_90 -j16 all >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"; exit 1
fi
echo "build: $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
case $part in
test) make BUILD=$build NVCC_ARCH=-arch=sm_90 -j16 test-gpu >"$out/test-gpu.log" 2>&1; rc=$? ;;
bench) make BUILD=$build NVCC_ARCH=-arch=sm_90 -j16 bench >"$out/bench.log" 2>&1; rc=$? ;;
unit) bins=$(make -s BUILD=$build print-test-bins 2>/dev/null)
      make BUILD=$build NVCC_ARCH=-arch=sm_90 -j16 $bins >"$out/build-tests.log" 2>&1 &&
          ULPSCOPE_BIN=$build/ulpscope ULPSCOPE_REQUIRE_GPU=1 sh tests/run_tests.sh $bins >"$out/unit.log" 2>&1
      rc=$?; tail -3 "$out/unit.log" ;;
checks) sh tests/gpu_checks.sh $build >"$out/checks.log" 2>&1; rc=$?; tail -5 "$out/checks.log" ;;
*) echo "unknown part $part"; exit 2 ;;
esac
echo "$part: exit $rc after $(( $(date +%s) - t0 )) s"
[ -f $build/check-matrix.jsonl ] && cp $build/check-matrix.jsonl "$out/"
exit $rc
