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
# norm-stability study (H3): the default grid as JSON, then two small tables
echo "== ulpscope norms (LayerNorm forward: variance algorithm against mean/std, fp32 statistics)"
"$ulpscope" norms --json "$dir/norms.jsonl" >/dev/null
"$ulpscope" norms --norm layernorm --pass fwd --format fp32,bf16 --acc fp32 --upcast none \
    --width 1024 --ratio 0,100,300,10000
echo "== ulpscope norms (RMSNorm forward in fp16 on x ~ 512, whose squares overflow fp16)"
"$ulpscope" norms --norm rmsnorm --pass fwd --format fp16 --data large --width 4096
awk '/"record":"norms"/ { n++; if ($0 ~ /"nonfinite":[1-9]/) nf++; if ($0 ~ /"stats_nonfinite":[1-9]/) so++ }
    END { printf "norms: %d records in %s; %d with non-finite outputs, %d with overflowed statistics\n", n, FILENAME, nf + 0, so + 0 }' \
    "$dir/norms.jsonl"
# matrix units (H6): the A100 and H100 models' fingerprints, and where they differ
echo "== ulpscope probe --model a100 vs --model h100 (differing properties)"
"$ulpscope" probe --model a100 --json "$dir/fp_a100.jsonl" >/dev/null
"$ulpscope" probe --model h100 --json "$dir/fp_h100.jsonl" >/dev/null
"$ulpscope" probe --diff "$dir/fp_a100.jsonl" "$dir/fp_h100.jsonl" | grep -E 'differs|compared'
# trainer (H7): a tiny GPT on the embedded corpus on the CPU backend (seconds), every slot per the bf16 plan
echo "== ulpscope train (gpt2, 2 layers, width 32, bf16 plan, embedded corpus, CPU backend)"
"$ulpscope" train --steps 60 --width 32 --heads 2 --seq 32 --batch 4 --lr 3e-3 --warmup 5 --val-every 30 \
    --progress-every 30 --log "$dir/train.jsonl"
awk -F'[:,]' '/"record":"step"/ { for (i = 1; i < NF; i++) if ($i == "\"loss\"") l = $(i+1); if (!n++) first = l; last = l }
    /"record":"final"/ { for (i = 1; i < NF; i++) if ($i == "\"val_loss\"") v = $(i+1) }
    END { printf "train: %d steps in %s, loss %.3f -> %.3f, final val loss %.3f (uniform over bytes: 5.545)\n", n, FILENAME, first, last, v }' \
    "$dir/train.jsonl"
# paired comparison (compare): arms against the base at the same seeds, the null arm (one flipped ulp)
# for the noise floor; the planted arm (its stores truncate) is the self-test that must come out SHIFT up.
# The results directory caches the runs: a second demo judges them again without training.  One
# per build (ulpscope --version names it): compare refuses the runs another build made.
backend=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then backend=cuda; fi
echo "== ulpscope compare (gpt2, 1 layer, width 32, $backend backend: naive attention and a planted truncation against bf16)"
"$ulpscope" compare --backend "$backend" --depth 1 --width 32 --heads 2 --seq 32 --batch 4 --steps 30 --lr 3e-3 \
    --seeds 6 --arm naive=attention=bf16:naive --arm trunc=residual=bf16 --plant-truncation trunc --quiet \
    --results "$dir/compare-$backend-$("$ulpscope" --version | awk '{ print $NF }')" --json "$dir/compare.jsonl"
awk -F'"' '/"record":"arm"/ && !/"base":true/ { for (i = 1; i < NF; i++) if ($i == "verdict") v[++n] = $8 ": " $(i+2) }
    END { printf "compare: %d arms judged in %s:", n, FILENAME; for (i = 1; i <= n; i++) printf " %s%s", v[i], i < n ? ";" : ""; print "" }' \
    "$dir/compare.jsonl"
