#!/bin/sh
# cli/demo.sh ULPSCOPE DIR — the main job on embedded defaults: every study,
# JSON Lines under DIR, a short readable summary on stdout.
set -eu
ulpscope=$1; dir=$2
mkdir -p "$dir"
# accumulation study (H2): the classic table, then a sweep the notebook plots
echo "== ulpscope accum (classic table)"
"$ulpscope" accum
"$ulpscope" accum --data constant,uniform,normal --algo all --round rne,sr --n-min 10 --n-max 100000 \
    --points 9 --pairs fp32/fp32,bf16/bf16,fp16/fp16,fp32/bf16,e4m3/e4m3 --json "$dir/accum.jsonl" >/dev/null
awk -F'[:,]' '/"record":"row"/ { rows++; e = ""; b = "";
        for (i = 1; i < NF; i++) { if ($i == "\"abs_err\"") e = $(i+1); if ($i == "\"bound\"") b = $(i+1) }
        if (b != "\"inf\"" && b != "\"nan\"" && e != "\"inf\"") { finite++; if (e + 0 > b + 0) over++ } }
    END { printf "accum: %d rows in %s; %d with a finite worst-case bound, %d of them over it\n", rows, FILENAME, finite, over + 0 }' \
    "$dir/accum.jsonl"
for r in rne sr; do
    grep '"acc":"bf16","addend":"bf16","algo":"recursive","round":"'$r'","data":"constant","n":100000,' "$dir/accum.jsonl" |
        awk -F'[:,]' -v r=$r '{ for (i = 1; i < NF; i++) { if ($i == "\"value\"") v = $(i+1); if ($i == "\"exact\"") x = $(i+1) }
            printf "accum: bf16 accumulator, 0.01 added 100000 times, %s: %g (exact sum of the stored addends %g)\n", r, v, x }'
done
