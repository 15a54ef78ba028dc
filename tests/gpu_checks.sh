#!/bin/sh
# tests/gpu_checks.sh BUILD — the GPU-only part of make test-gpu: the whole
# kernel check matrix, then compute-sanitizer memcheck and racecheck.
set -eu
build=$1

# ---- kernels: the check matrix, the planted-bug twins, sanitizers (H4) ----
# The whole matrix on fresh inputs (every row must PASS), then each planted
# bug on the quick shapes (exit 0 only when every twin FAILs somewhere),
# then compute-sanitizer memcheck and racecheck on a reduced run.
sanitizer=${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer
command -v compute-sanitizer >/dev/null 2>&1 && sanitizer=$(command -v compute-sanitizer)
"$build/ulpscope" check --json "$build/check-matrix.jsonl"
"$build/ulpscope" check --quick --bug drop-term
"$build/ulpscope" check --quick --bug truncate-output
"$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 "$build/ulpscope" check --quick --path bf16
"$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 "$build/ulpscope" check --quick --path fp8
"$sanitizer" --tool racecheck --error-exitcode 1 --print-limit 20 "$build/ulpscope" check --quick --path fp32
# the tensor-core attention (shared-memory double buffering) exists on bf16 and fp16 only
"$sanitizer" --tool racecheck --error-exitcode 1 --print-limit 20 "$build/ulpscope" check attention --quick --path bf16
# matrix units (H6): 10^5 random dot products per instruction, hardware against the H100 model
"$build/ulpscope" probe --validate 100000 >/dev/null
# trainer (H7): every preset and family trains a few steps on the CUDA backend,
# then one step under compute-sanitizer memcheck
for model in gpt2 modern; do
    for plan in fp32 bf16 fp16 fp8; do
        "$build/ulpscope" train --backend cuda --model "$model" --plan "$plan" --steps 5 --width 64 --heads 4 \
            --seq 64 --batch 4 --quiet
    done
done
"$sanitizer" --tool memcheck --error-exitcode 1 --print-limit 20 "$build/ulpscope" train --backend cuda \
    --model modern --steps 1 --width 32 --heads 2 --seq 32 --batch 2 --quiet
