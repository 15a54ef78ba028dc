#!/bin/sh
# tests/dp_check.sh ULPSCOPE OUT [SEEDS] — data parallel over NCCL on a machine
# with WORLD GPUs (environment; default 2, the issue's study: WORLD=4): does the
# WORLD-GPU run reproduce the 1-GPU curve within noise, and what do the
# all-reduce algorithm (ring or tree) and its wire format (fp32 or bf16) change?
#   1 GPU, batch 16            against   WORLD GPUs x batch 16/WORLD (same global
#   batch), all-reduce fp32 ring, fp32 tree and bf16 ring, one process per GPU,
#   the NCCL id exchanged through a file; SEEDS seeds each (default 8), plus a
#   repeat of the fp32 ring run (NCCL's determinism under the pinned algorithm).
# Prints each run's final validation loss and state hash, then per
# configuration mean and standard deviation, Welch's t against the 1-GPU runs,
# and, paired by seed, the mean difference against the fp32 ring run with its
# 95% interval (t quantile for SEEDS - 1 degrees of freedom).  At WORLD = 2 ring
# and tree cannot differ (one addition per element); from 4 ranks on they may.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0): see the device notes.
set -u
ulpscope=$1; out=$2; seeds=${3:-8}
world=${WORLD:-2}
case $world in 2|4|8) ;; *) echo "dp_check: WORLD=$world (2, 4 or 8: the global batch 16 splits evenly)" >&2; exit 2 ;; esac
mkdir -p "$out"
data=data/tinyshakespeare.txt
[ -f "$data" ] || data=../shared/data/tinyshakespeare.txt
export NCCL_NVLS_ENABLE=0
# Validation batches are per-rank sized windows, so WORLD x (16/WORLD) evaluates
# 16 WORLD batches to cover the same 256 windows as 16 batches of 16.
per_rank=$((16 / world)); val_batches=$((16 * world))
common="--backend cuda --model gpt2 --depth 4 --width 128 --heads 4 --seq 128 --steps 300 --warmup 20 --lr 2e-3
        --quiet --data $data"
final() { grep '"record":"final"' "$1" | sed 's/.*"val_loss":\([^,]*\),.*"state_hash":"\([0-9a-fx]*\)".*/\1 \2/'; }

run_dp() { # tag seed allreduce-setting
    id="$out/nccl-$1-$2.id"; rm -f "$id"
    rank=0
    while [ $rank -lt "$world" ]; do
        CUDA_VISIBLE_DEVICES=$rank "$ulpscope" train $common --seed "$2" --batch $per_rank --val-batches $val_batches \
            --world "$world" --rank $rank --nccl-id "$id" --set "allreduce=$3" --log "$out/$1-$2-rank$rank.jsonl" \
            2>"$out/$1-$2-rank$rank.err" &
        rank=$((rank + 1))
    done
    wait
    cat "$out/$1-$2"-rank*.err
    echo "$1 $2 $(final "$out/$1-$2-rank0.jsonl")" >>"$out/dp.txt"   # rank 0 writes the log
}

: >"$out/dp.txt"
s=1
while [ $s -le "$seeds" ]; do
    CUDA_VISIBLE_DEVICES=0 "$ulpscope" train $common --seed $s --batch 16 --val-batches 16 --log "$out/one-$s.jsonl" 2>"$out/one-$s.err"
    cat "$out/one-$s.err"
    echo "one $s $(final "$out/one-$s.jsonl")" >>"$out/dp.txt"
    run_dp ring $s fp32:ring
    run_dp tree $s fp32:tree
    run_dp bf16ring $s bf16:ring
    s=$((s + 1))
done
run_dp ring-again 1 fp32:ring
echo "world $world, config seed final_val_loss state_hash"
cat "$out/dp.txt"
awk '{ n[$1]++; s[$1] += $3; q[$1] += $3 * $3 }
     END { for (c in n) { m[c] = s[c] / n[c]; v[c] = n[c] > 1 ? (q[c] - n[c] * m[c] * m[c]) / (n[c] - 1) : 0 }
           for (c in n) if (c != "ring-again") {
               t = (c == "one") ? 0 : (m[c] - m["one"]) / sqrt(v[c] / n[c] + v["one"] / n["one"] + 1e-300)
               printf "%-8s n=%d mean %.5f sd %.5f  Welch t vs one: %+.2f\n", c, n[c], m[c], sqrt(v[c] > 0 ? v[c] : 0), t } }' \
    "$out/dp.txt"
# paired by seed against the fp32 ring run; bit-identical pairs counted
awk 'BEGIN { split("12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 " \
                   "2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042", t975, " ") }
     function tq(df) { return df <= 30 ? t975[df] : 1.96 + 2.4 / df } # two-sided 95% t quantile
     $1 != "ring-again" { loss[$1, $2] = $3; hash[$1, $2] = $4; seen[$1] = 1; if ($2 > ns) ns = $2 }
     END { for (c in seen) if (c != "ring") {
               n = 0; sd = 0; sq = 0; same = 0
               for (i = 1; i <= ns; i++) if ((c, i) in loss && ("ring", i) in loss) {
                   d = loss[c, i] - loss["ring", i]; n++; sd += d; sq += d * d; same += hash[c, i] == hash["ring", i] }
               if (n < 2) continue
               m = sd / n; v = (sq - n * m * m) / (n - 1); h = tq(n - 1) * sqrt((v > 0 ? v : 0) / n)
               printf "%-8s - ring, paired over %d seeds: %+.5f [%+.5f, %+.5f]; %d of %d bit-identical\n", c, n, m, m - h, m + h, same, n } }' \
    "$out/dp.txt"
# the repeat must equal the first ring run bit for bit
r1=$(awk '$1 == "ring" && $2 == 1 { print $4 }' "$out/dp.txt")
r2=$(awk '$1 == "ring-again" { print $4 }' "$out/dp.txt")
if [ -n "$r1" ] && [ "$r1" = "$r2" ]; then echo "repeated $world-GPU ring run bit-identical (state $r1)"
else echo "repeated $world-GPU ring run differs: $r1 vs $r2"; exit 1; fi
