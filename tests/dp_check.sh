#!/bin/sh
# tests/dp_check.sh ULPSCOPE OUT [SEEDS] — data parallel over NCCL on a machine
# with 2 GPUs: does the 2-GPU run reproduce the 1-GPU curve within noise, and
# what does the all-reduce algorithm (ring or tree) change?
#   1 GPU, batch 16            against   2 GPUs x batch 8 (same global batch),
#   all-reduce fp32 ring and fp32 tree, one process per GPU, the NCCL id
#   exchanged through a file; SEEDS seeds each (default 8), plus a repeat of
#   the ring run (determinism).  Prints each run's final validation loss and
#   state hash, then per configuration mean and standard deviation and Welch's
#   t against the 1-GPU runs.
set -u
ulpscope=$1; out=$2; seeds=${3:-8}
mkdir -p "$out"
data=data/tinyshakespeare.txt
[ -f "$data" ] || data=../shared/data/tinyshakespeare.txt
# Validation batches are per-rank sized windows, so 2 x 8 evaluates 32 batches to
# cover the same 256 windows as 16 batches of 16.
common="--backend cuda --model gpt2 --depth 4 --width 128 --heads 4 --seq 128 --steps 300 --warmup 20 --lr 2e-3
        --quiet --data $data"
final() { grep '"record":"final"' "$1" | sed 's/.*"val_loss":\([^,]*\),.*"state_hash":"\([0-9a-f]*\)".*/\1 \2/'; }

run_dp() { # tag seed variant
    id="$out/nccl-$1-$2.id"; rm -f "$id"
    for rank in 0 1; do
        CUDA_VISIBLE_DEVICES=$rank "$ulpscope" train $common --seed "$2" --batch 8 --val-batches 32 --world 2 --rank $rank \
            --nccl-id "$id" --set "allreduce=fp32:$3" --log "$out/$1-$2-rank$rank.jsonl" \
            2>"$out/$1-$2-rank$rank.err" &
    done
    wait
    cat "$out/$1-$2-rank0.err" "$out/$1-$2-rank1.err"
    echo "$1 $2 $(final "$out/$1-$2-rank0.jsonl")" >>"$out/dp.txt"   # rank 0 writes the log
}

: >"$out/dp.txt"
s=1
while [ $s -le "$seeds" ]; do
    CUDA_VISIBLE_DEVICES=0 "$ulpscope" train $common --seed $s --batch 16 --val-batches 16 --log "$out/one-$s.jsonl" 2>"$out/one-$s.err"
    cat "$out/one-$s.err"
    echo "one $s $(final "$out/one-$s.jsonl")" >>"$out/dp.txt"
    run_dp ring $s ring
    run_dp tree $s tree
    s=$((s + 1))
done
run_dp ring-again 1 ring
echo "config seed final_val_loss state_hash"
cat "$out/dp.txt"
awk '{ n[$1]++; s[$1] += $3; q[$1] += $3 * $3 }
     END { for (c in n) { m[c] = s[c] / n[c]; v[c] = n[c] > 1 ? (q[c] - n[c] * m[c] * m[c]) / (n[c] - 1) : 0 }
           for (c in n) if (c != "ring-again") {
               t = (c == "one") ? 0 : (m[c] - m["one"]) / sqrt(v[c] / n[c] + v["one"] / n["one"] + 1e-300)
               printf "%-6s n=%d mean %.5f sd %.5f  Welch t vs one: %+.2f\n", c, n[c], m[c], sqrt(v[c] > 0 ? v[c] : 0), t } }' \
    "$out/dp.txt"
# the repeat must equal the first ring run bit for bit
r1=$(awk '$1 == "ring" && $2 == 1 { print $4 }' "$out/dp.txt")
r2=$(awk '$1 == "ring-again" { print $4 }' "$out/dp.txt")
if [ -n "$r1" ] && [ "$r1" = "$r2" ]; then echo "repeated 2-GPU ring run bit-identical (state $r1)"
else echo "repeated 2-GPU ring run differs: $r1 vs $r2"; exit 1; fi
