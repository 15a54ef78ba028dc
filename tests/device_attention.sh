#!/bin/sh
# tests/device_attention.sh — on a GPU machine: everything the tensor-core
# attention (flash_mma, flash_mma_exp2) needs verified, each step's log under
# $OUT (default ./out-attention), a summary printed last.
#   1. build for this GPU only (BUILD=/tmp/b-att, kept while the machine is warm)
#   2. the attention tests: CPU ones (bound vs emulation, fragment layout, block
#      bound) and the GPU one (prefix rows bitwise, every flash variant), which
#      must run, not skip
#   3. ulpscope check attention: every path x variant (fp32 x flash_mma: "not
#      offered"), then the drop-term and truncate-output twins (every twin caught)
#   4. compute-sanitizer memcheck, racecheck and synccheck on the flash_mma check
#   5. bitwise repeatability: two bench_attention --dump runs compared with cmp
#   6. the benchmark table (forward and backward ms, every variant, T 1024 and
#      4096, D 64 and 128) and a short training run with each flash variant
# Usage: sh tests/device_attention.sh [STEPS]   (STEPS: a subset of "build tests
# check twins sanitize repeat bench train"; default all).  Exit status 0 when
# every step run passed.
set -u
out=${OUT:-./out-attention}
build=${BUILD:-/tmp/b-att}
steps=${1:-"build tests check twins sanitize repeat bench train"}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
status=0

note() { echo "$*" | tee -a "$summary"; }
# run NAME TIMEOUT CMD...: the command's output in $out/NAME.log, a PASS/FAIL line
run() {
    name=$1; limit=$2; shift 2
    t0=$(date +%s)
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    if [ $rc -eq 0 ]; then note "PASS  $name (${dt} s)"; else note "FAIL  $name: exit $rc after ${dt} s (log: $name.log)"; status=1; fi
    return $rc
}
want() { case " $steps " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_cap --format=csv,noheader
    nvcc --version | tail -1
    git rev-parse HEAD 2>/dev/null
} >"$out/device.txt" 2>&1
note "device: $(head -1 "$out/device.txt")"
arch="-gencode=arch=compute_${cc:-90},code=sm_${cc:-90}"
sanitizer=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
command -v compute-sanitizer >/dev/null 2>&1 && sanitizer=$(command -v compute-sanitizer)
U="$build/ulpscope"

if want build; then
    run build 580 make BUILD="$build" NVCC_ARCH="$arch" -j"$(nproc)" all \
        "$build/tests/test_kernels_gpu_attention" "$build/tests/test_attention_mma_bound" \
        "$build/tests/test_attention_mma_layout" "$build/tests/test_mma_bound" "$build/bench/bench_attention" ||
        { tail -30 "$out/build.log"; cat "$summary"; exit 1; }
    # registers, spills and shared memory of the tensor-core kernels, as ptxas reports them
    nvcc -O3 -std=c++17 -I. -I"${CUDA_HOME:-/usr/local/cuda}/include" $arch -Xptxas -v -c kernels/attention_mma.cu \
        -o /tmp/attention_mma_v.o >"$out/ptxas.log" 2>&1
    note "ptxas: $(grep -c 'Used' "$out/ptxas.log") kernels, $(grep -c ' 0 bytes spill stores' "$out/ptxas.log") without spills"
fi

if want tests; then
    for t in test_attention_mma_layout test_mma_bound test_attention_mma_bound test_kernels_gpu_attention; do
        run "$t" 300 env ULPSCOPE_REQUIRE_GPU=1 "$build/tests/$t"
    done
fi

if want check; then
    run check 580 "$U" check attention --json "$out/check-attention.jsonl"
    grep -E "FAIL|ERROR|not offered" "$out/check.log" | head -20 >>"$summary"
    # worst error/bound ratio per variant and output, from the table
    # (columns: op path variant BH= T= D= output n max_err_u rms_err_u bound_u rms_bnd_u ratio verdict)
    awk '$1 == "attention" && $NF ~ /PASS|FAIL/ { k = $2 " " $3 " " $7; if ($(NF-1) + 0 > w[k]) w[k] = $(NF-1) + 0 }
         END { for (k in w) printf "  worst ratio %-28s %.3f\n", k, w[k] }' "$out/check.log" | sort >>"$summary"
fi

if want twins; then
    run twin-drop-term 580 "$U" check attention --quick --bug drop-term
    run twin-truncate-output 580 "$U" check attention --quick --bug truncate-output
    grep -E "NOT CAUGHT" "$out/twin-drop-term.log" "$out/twin-truncate-output.log" >>"$summary"
fi

if want sanitize; then
    run memcheck 580 "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 \
        "$U" check attention --path bf16 --variant flash_mma
    run memcheck-fp16-exp2 580 "$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 \
        "$U" check attention --quick --path fp16 --variant flash_mma_exp2
    run racecheck 580 "$sanitizer" --tool racecheck --error-exitcode 1 --print-limit 20 \
        "$U" check attention --path bf16 --variant flash_mma
    run synccheck 580 "$sanitizer" --tool synccheck --error-exitcode 1 --print-limit 20 \
        "$U" check attention --quick --path fp16 --variant flash_mma
    run initcheck 580 "$sanitizer" --tool initcheck --error-exitcode 1 --print-limit 20 \
        "$U" check attention --quick --path bf16 --variant flash_mma_exp2
fi

if want repeat; then
    run dump-1 580 "$build/bench/bench_attention" --dump /tmp/att-dump-1.bin &&
        run dump-2 580 "$build/bench/bench_attention" --dump /tmp/att-dump-2.bin &&
        run repeat-bitwise 60 cmp /tmp/att-dump-1.bin /tmp/att-dump-2.bin
fi

if want bench; then
    run bench 580 "$build/bench/bench_attention" --reps 10
    grep -E "^(96|48) " "$out/bench.log" >>"$summary"
fi

if want train; then
    # a byte corpus long enough for sequence 1024 (the embedded one is 6 KB): the repository's own text
    corpus=/tmp/att-corpus.txt
    cat README.md docs/*.md kernels/*.c kernels/*.cu >"$corpus"
    # gpt2 shape (D 64), a short run per variant: losses side by side
    for v in flash flash_exp2 flash_mma flash_mma_exp2; do
        run "train-$v" 300 "$U" train --backend cuda --model gpt2 --depth 2 --width 128 --heads 2 --seq 256 \
            --batch 8 --steps 30 --data "$corpus" --set "attention=bf16:$v" --progress-every 10 \
            --log "$out/train-$v.jsonl"
        note "  $v: $(grep -v '^$' "$out/train-$v.log" | tail -1)"
    done
    # where the time goes at gpt2 d12, batch 8, sequence 1024, before and after
    for v in flash flash_mma_exp2; do
        run "profile-$v" 300 "$U" train --backend cuda --model gpt2 --depth 12 --width 768 --heads 12 --seq 1024 \
            --batch 8 --steps 6 --data "$corpus" --set "attention=bf16:$v" --profile
        grep -iE "attention|ms/step|tok/s" "$out/profile-$v.log" | head -8 | sed "s/^/  $v: /" >>"$summary"
    done
fi

echo "==== summary ($out/summary.txt) ===="
cat "$summary"
exit $status
