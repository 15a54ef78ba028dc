#!/bin/sh
# tests/device_a100.sh OUT — what a GPU machine (an H100) verifies for the A100
# path in training (issue 13), every log under OUT:
#   build (sm_90), then the GPU tests of the emulation (bit-exact vs the CPU
#   model on 10^5 dots per format with twins, transposed layouts, the H100
#   model vs native mma.sync), the CUDA-vs-CPU backend comparison of
#   matmul_mma, the CPU proofs of the fast arithmetic, and bench_mma_emulate
#   gemm (1024x1024x4096: target <= 5 ms; integer issue fraction; the batched
#   replicas' equality with single calls is test_mma_emulate_gpu's).
set -u
out=$1
build=${BUILD:-/tmp/b-a100}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$out/device.txt" 2>&1
git rev-parse HEAD >>"$out/device.txt" 2>/dev/null
cat "$out/device.txt"
if ! make BUILD=$build NVCC_ARCH=-arch=sm_90 -j16 $build/tests/test_mma_fast $build/tests/test_mma_emulate_gpu \
        $build/tests/test_train_mma $build/tests/test_probe_gpu $build/bench/bench_mma_emulate >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"; exit 1
fi
rc=0
for t in test_mma_fast test_mma_emulate_gpu test_train_mma test_probe_gpu; do
    ULPSCOPE_REQUIRE_GPU=1 timeout 300 $build/tests/$t >"$out/$t.log" 2>&1 || rc=1
    echo "$t: $(tail -1 "$out/$t.log")"
done
timeout 120 $build/bench/bench_mma_emulate gemm >"$out/bench_mma_emulate.log" 2>&1 || rc=1
cat "$out/bench_mma_emulate.log"
exit $rc
