#!/bin/sh
# notebooks/make_results.sh ULPSCOPE DIR — the result files the notebooks read,
# written on the CPU in seconds.  Each study adds its line here.
set -eu
ulpscope=$1; dir=$2
mkdir -p "$dir"
# accumulation study (H2): error against n by format pair, algorithm, rounding
"$ulpscope" accum --data constant,uniform,normal --algo all --round rne,sr --n-min 10 --n-max 100000 \
    --points 9 --pairs fp32/fp32,bf16/bf16,fp16/fp16,fp32/bf16,e4m3/e4m3 --json "$dir/accum.jsonl" >/dev/null
# norm-stability study (H3): error by variant against mean/std and width (--quick grid)
"$ulpscope" norms --quick --json "$dir/norms.jsonl" >/dev/null
# matrix units (H6): the fingerprint each model predicts, and fp8 accumulation error against K
for gen in v100 a100 h100 b200; do
    "$ulpscope" probe --model $gen --json "$dir/fp_$gen.jsonl" >/dev/null
done
"$ulpscope" probe --model h100 --accum-sweep --dots 32 --json "$dir/accum_fp8_h100.jsonl" >/dev/null
"$ulpscope" probe --model b200 --accum-sweep --dots 32 --json "$dir/accum_fp8_b200.jsonl" >/dev/null
# paired comparison of plans (compare): a tiny GPT on the CPU, the null arm, naive attention and a
# planted truncation against the bf16 base at six seeds
"$ulpscope" compare --depth 1 --width 16 --heads 2 --seq 16 --batch 4 --steps 24 --lr 3e-3 --seeds 6 \
    --arm naive=attention=bf16:naive --arm trunc=residual=bf16 --plant-truncation trunc --quiet \
    --json "$dir/compare.jsonl" >/dev/null
