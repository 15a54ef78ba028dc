#!/bin/sh
# notebooks/make_results.sh ULPSCOPE DIR — the result files the notebooks read,
# written on the CPU in seconds.  Each study adds its line here.
set -eu
ulpscope=$1; dir=$2
mkdir -p "$dir"
# accumulation study (H2): error against n by format pair, algorithm, rounding
"$ulpscope" accum --data constant,uniform,normal --algo all --round rne,sr --n-min 10 --n-max 100000 \
    --points 9 --pairs fp32/fp32,bf16/bf16,fp16/fp16,fp32/bf16,e4m3/e4m3 --json "$dir/accum.jsonl" >/dev/null
