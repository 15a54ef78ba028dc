#!/bin/sh
# bench/llmc_side_by_side.sh LLMC_DIR ULPSCOPE OUT [TEXT] — ulpscope's trainer
# against llm.c's train_gpt2cu on the same GPU in one call (issue 14).
#
# LLMC_DIR is a checkout of https://github.com/karpathy/llm.c the user
# supplies (the figures in docs/ used commit f1e2ace; without .git, name it in
# LLMC_COMMIT); it is built here, in a
# copy under $TMPDIR, with its own Makefile and default flags (no cuDNN, one GPU).
# Nothing of llm.c is part of ulpscope.
#
# Same work for both: gpt2 depth 12, width 768, 12 heads, vocabulary 50304
# (llm.c's padded GPT-2 vocabulary), sequence 1024, batch 8 and 16, random
# init, bf16 (llm.c: bf16 activations, fp32 master weights; ulpscope: the bf16
# preset, plus each attention variant named in ATTENTION, each alone and with
# each of the --set lists in EXTRA_SETS, space-separated; each preset named in
# PLANS, default bf16, e.g. PLANS="bf16 fp8"), one token shard in
# llm.c's format holding TEXT's bytes as tokens (speed does not depend on the
# token values).  Each trainer runs STEPS steps (default 30); the figure is the
# median step time of steps 3..STEPS-1 (warm-up and the last step excluded),
# from llm.c's "step" lines and ulpscope's --log records.  Peak device memory:
# the largest memory.used nvidia-smi reports while each run is alive (sampled
# every 100 ms), so both sides are measured the same way.
#
# Output: OUT/side_by_side.txt (the table) and every run's raw log.
set -eu
[ $# -ge 3 ] || { echo "usage: bench/llmc_side_by_side.sh LLMC_DIR ULPSCOPE OUT [TEXT]" >&2; exit 2; }
llmc=$1 u=$2 out=$3 text=${4:-data/tinyshakespeare.txt}
steps=${STEPS:-30}
attention=${ATTENTION:-"flash flash_mma flash_mma_exp2"}
plans=${PLANS:-bf16}
extra_sets=${EXTRA_SETS:-}
[ -f "$llmc/train_gpt2.cu" ] || { echo "llmc_side_by_side: $llmc has no train_gpt2.cu (give an llm.c checkout)" >&2; exit 2; }
[ -x "$u" ] || { echo "llmc_side_by_side: $u is not an executable ulpscope" >&2; exit 2; }
[ -r "$text" ] || { echo "llmc_side_by_side: cannot read $text" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd)
work=${TMPDIR:-/tmp}/llmc-side-by-side
rm -rf "$work" && cp -r "$llmc" "$work"
# CUDA 13 takes a cudaMemLocation where llm.c (written for CUDA 12) passes
# the device id cudaCpuDeviceId, in its managed-memory fallback: the one line
# that does not compile, adapted in the build copy only (same meaning: prefer
# the host).  Nothing else of llm.c is changed.
if [ "$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')" -ge 13 ]; then
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
        "$work/llmc/cuda_utils.cuh"
fi
(cd "$work" && make train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0 >build.log 2>&1) ||
    { tail -20 "$work/build.log" >&2; echo "llmc_side_by_side: llm.c did not build" >&2; exit 1; }

# the shard: 256 int32 header (magic 20240520, version 1, count), uint16 tokens
python3 - "$text" "$work/shard.bin" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
header = [20240520, 1, len(data)] + [0] * 253
open(sys.argv[2], "wb").write(struct.pack("<256i", *header) + struct.pack("<%dH" % len(data), *data))
PY

# peak_of CMD...: runs CMD, samples the GPU's memory.used meanwhile, prints the peak (MiB)
peak_of() {
    "$@" &
    pid=$! peak=0
    while kill -0 $pid 2>/dev/null; do
        m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
        [ "$m" -gt "$peak" ] && peak=$m
        sleep 0.1
    done
    wait $pid || { echo "llmc_side_by_side: '$*' failed" >&2; return 1; }
    echo "$peak" >"$out/peak.tmp"
}

# median of the numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
{
    echo "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | head -1)"
    echo "llm.c: $(if [ -e "$llmc/.git" ]; then git -C "$llmc" rev-parse --short HEAD; else echo "${LLMC_COMMIT:-commit unknown}"; fi)"
    echo "steps $steps, median of steps 3..$((steps - 2)); memory: peak nvidia-smi memory.used minus $base MiB idle"
    printf '%-34s %6s %10s %12s %10s %10s\n' trainer batch "ms/step" "tok/s" "x llm.c" "peak MiB"
} >"$out/side_by_side.txt"

for b in 8 16; do
    (cd "$work" && peak_of ./train_gpt2cu -i "$work/shard.bin" -j "$work/shard.bin" -e d12 -b $b -t 1024 -x $steps \
        >"$out/llmc_b$b.log" 2>&1)
    lpeak=$(( $(cat "$out/peak.tmp") - base ))
    lms=$(grep '^step' "$out/llmc_b$b.log" | awk -v n="$steps" '{split($0, f, "|"); split($1 " " $2, s, "[ /]+");
        if (s[2] + 0 >= 3 && s[2] + 0 <= n - 2) { sub(/ ms.*/, "", f[5]); print f[5] + 0 }}' | median)
    printf '%-34s %6d %10.2f %12.0f %10s %10d\n' "llm.c train_gpt2cu" $b "$lms" \
        "$(awk -v b=$b -v ms="$lms" 'BEGIN {print b * 1024 * 1000 / ms}')" 1.00 $lpeak >>"$out/side_by_side.txt"
    for p in $plans; do
    for a in $attention; do
    for x in - $extra_sets; do
        if [ "$x" = - ]; then set_list="attention=bf16:$a" tag=$p+$a label="$p, attention $a"
        else set_list="attention=bf16:$a,$x" tag=$p+$a+$(echo "$x" | tr -c 'a-zA-Z0-9_\n' _) label="$p, $a, $x"; fi
        log=$out/ulpscope_b${b}_$tag.jsonl
        peak_of "$u" train --backend cuda --model gpt2 --depth 12 --width 768 --heads 12 --vocab 50304 --context 1024 \
            --seq 1024 --batch $b --steps $steps --lr 3e-4 --data "$work/shard.bin" --plan $p --set "$set_list" \
            --log "$log" --quiet >"$out/ulpscope_b${b}_$tag.txt" 2>&1
        upeak=$(( $(cat "$out/peak.tmp") - base ))
        ums=$(grep '"record":"step"' "$log" | sed 's/.*"step":\([0-9]*\),.*"ms":\([0-9.e+-]*\),.*/\1 \2/' |
            awk -v n="$steps" '$1 >= 3 && $1 <= n - 2 {print $2}' | median)
        printf '%-34s %6d %10.2f %12.0f %10.2f %10d\n' "ulpscope $label" $b "$ums" \
            "$(awk -v b=$b -v ms="$ums" 'BEGIN {print b * 1024 * 1000 / ms}')" \
            "$(awk -v l="$lms" -v u="$ums" 'BEGIN {print l / u}')" $upeak >>"$out/side_by_side.txt"
    done
    done
    done
done
rm -f "$out/peak.tmp"
cat "$out/side_by_side.txt"
