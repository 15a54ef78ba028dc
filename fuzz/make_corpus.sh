#!/bin/sh
# fuzz/make_corpus.sh [ULPSCOPE] — writes the seed corpora fuzz/corpus/TARGET/
# anew from what the real tools write (default build/ulpscope), in the
# input layout each target's header comment gives.  Run it after a change
# of a file format (a checkpoint version, the fingerprint records), then
# commit the corpus.  Needs python3 (bytes packing only).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$(dirname "${1:-$here/build/ulpscope}")" && pwd)/$(basename "${1:-$here/build/ulpscope}")
[ -x "$bin" ] || { echo "make_corpus: no ulpscope at $bin (make first)" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
out=$here/fuzz/corpus
rm -rf "$out" && mkdir -p "$out"
cd "$work"

# A token shard in the llm.c format: 256 int32 header (magic 20240520,
# version 1, token count), then uint16 tokens.  shard FILE VOCAB COUNT [MAGIC VERSION]
shard() {
    python3 - "$@" <<'PY'
import struct, sys
path, vocab, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
magic = int(sys.argv[4]) if len(sys.argv) > 4 else 20240520
version = int(sys.argv[5]) if len(sys.argv) > 5 else 1
header = [magic, version, count] + [0] * 253
tokens = [(7 * i * i + 3 * i) % vocab for i in range(count)]
open(path, "wb").write(struct.pack("<256i", *header) + struct.pack("<%dH" % count, *tokens))
PY
}
# prefix OUT BYTES... IN: OUT = the given prefix bytes then IN
prefix() {
    o=$1; shift
    python3 - "$o" "$@" <<'PY'
import sys
out, args = sys.argv[1], sys.argv[2:]
data = open(args[-1], "rb").read() if args[-1] != "-" else b""
open(out, "wb").write(bytes(int(a, 0) for a in args[:-1]) + data)
PY
}

# ---- fuzz_plan_json: plans as `ulpscope plan` prints them -------------------------
d=$out/fuzz_plan_json; mkdir -p "$d"
for model in gpt2 modern; do
    for preset in fp32 bf16 fp16 fp8; do
        "$bin" plan --plan $preset --model $model >"$d/$model-$preset.json"
    done
done
"$bin" plan --model modern --depth 4 --set 'mlp.up@0-1=fp32,attn.*@3=fp8:fast,rmsnorm@2=bf16' >"$d/modern-layers.json"
"$bin" plan --plan fp8 --set 'weights=bf16:sr,optimizer.adamw=bf16,lm_head=fp8:fast' >"$d/gpt2-sr.json"

# ---- fuzz_plan_set: byte 0 = preset (bits 0-1) and family (bit 2), then overrides ---
d=$out/fuzz_plan_set; mkdir -p "$d"
i=0
for ov in 'lm_head=fp8:fast' 'mlp.up@0=bf16' 'attn.*@11=fp8:fast' '*@0=fp32' 'mlp.up@0=bf16,mlp.up@11=bf16' \
          'rmsnorm=fp32' 'layernorm@0-2=fp16' 'weights=bf16:sr,optimizer.adamw=bf16' '*.wgrad=fp32' \
          'lm_head=fp8:blockwise' 'attention=bf16' 'optimizer.muon=bf16'; do
    for sel in 1 4 7; do
        printf '%s' "$ov" >"$work/ov"
        prefix "$d/set-$i-$sel" $sel "$work/ov"
    done
    i=$((i + 1))
done
# every slot's own choice in each preset, as an override list
for model in gpt2 modern; do
    for preset in fp32 bf16 fp16 fp8; do
        "$bin" plan --plan $preset --model $model >"$work/p.json"
        python3 - "$work/p.json" "$work/ov" <<'PY'
import json, sys
slots = json.load(open(sys.argv[1]))["slots"]
open(sys.argv[2], "w").write(",".join("%s=%s" % kv for kv in slots.items()))
PY
        sel=$(( $(echo "fp32 bf16 fp16 fp8" | tr ' ' '\n' | grep -n "^$preset$" | cut -d: -f1) - 1 ))
        [ $model = modern ] && sel=$((sel + 4))
        prefix "$d/all-$model-$preset" $sel "$work/ov"
    done
done

# ---- fuzz_npy, fuzz_safetensors: tensors as NumPy writes them (what verify reads) -------
d=$out/fuzz_npy; mkdir -p "$d"
d2=$out/fuzz_safetensors; mkdir -p "$d2"
python3 - "$d" "$d2" <<'PY'
import json, struct, sys
import numpy as np
npy, st = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(5)
for name, a in [("f4-2d", rng.standard_normal((3, 5)).astype(np.float32)),
                ("f8-1d", rng.standard_normal(7)), ("f2-3d", rng.standard_normal((2, 2, 3)).astype(np.float16)),
                ("u2-bf16", (rng.standard_normal((4, 4)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)),
                ("i4", np.arange(6, dtype=np.int32).reshape(2, 3)), ("u1", np.arange(5, dtype=np.uint8)),
                ("scalar", np.float32(1.5)), ("empty", np.zeros((0, 4), np.float32)),
                ("big-endian", rng.standard_normal(3).astype(">f4"))]:
    np.save("%s/%s.npy" % (npy, name), a)
def safetensors(path, tensors):
    header, blob = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, a in tensors:
        raw = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + blob)
x = rng.standard_normal((4, 8)).astype(np.float32)
bits = lambda a: (a.view(np.uint32) >> 16).astype(np.uint16)
safetensors(st + "/rmsnorm-f32.safetensors", [("x", "F32", x), ("gain", "F32", np.ones(8, np.float32)), ("y", "F32", x)])
safetensors(st + "/rmsnorm-bf16.safetensors", [("x", "BF16", bits(x)), ("y", "BF16", bits(x)), ("rstd", "F32", np.ones(4, np.float32))])
safetensors(st + "/mixed.safetensors", [("a", "F64", rng.standard_normal(3)), ("b", "F16", np.ones((2, 2), np.float16)),
                                        ("c", "I64", np.arange(3)), ("d", "U8", np.arange(4, dtype=np.uint8))])
safetensors(st + "/empty.safetensors", [])
PY

# ---- fuzz_checkpoint: real checkpoints without their last 8 bytes (the checksum) -----
d=$out/fuzz_checkpoint; mkdir -p "$d"
shard "$work/tok.bin" 16 400
ckpt() {
    name=$1; shift
    "$bin" train --steps 2 --width 8 --heads 2 --seq 4 --batch 1 --data tok.bin --vocab 16 \
        --quiet --ckpt "$work/$name.ckpt" "$@" >/dev/null
    head -c $(( $(wc -c <"$work/$name.ckpt") - 8 )) "$work/$name.ckpt" >"$d/$name"
}
ckpt gpt2-fp32 --depth 1 --plan fp32
ckpt gpt2-bf16 --depth 1 --plan bf16
ckpt gpt2-fp8-sr --depth 1 --plan fp8 --set 'weights=bf16:sr,optimizer.adamw=bf16'
ckpt modern-bf16 --depth 1 --model modern --plan bf16
ckpt modern-fp16-scaled --depth 1 --model modern --plan fp16
ckpt gpt2-depth2-layers --depth 2 --set 'mlp.up@1=fp32'

# ---- fuzz_shard: byte 0 = source, vocabulary, held-out fraction; byte 1 = T; bytes 2-3 = split
d=$out/fuzz_shard; mkdir -p "$d"
shard "$work/s1.bin" 50257 300
shard "$work/s2.bin" 256 100
shard "$work/s3.bin" 65535 40
cat "$work/s2.bin" "$work/s3.bin" >"$work/s23.bin"
n2=$(wc -c <"$work/s2.bin")
prefix "$d/one-shard" 0x00 8 0 0 "$work/s1.bin"
prefix "$d/one-shard-vocab256" 0x08 4 0 0 "$work/s2.bin"
prefix "$d/dir-train-val" 0x01 8 $((n2 & 255)) $((n2 >> 8)) "$work/s23.bin"
prefix "$d/dir-train-val-vocab65535" 0x19 3 $((n2 & 255)) $((n2 >> 8)) "$work/s23.bin"
prefix "$d/dir-one-shard" 0x22 16 0 0 "$work/s1.bin"
head -c 2000 "$here/README.md" >"$work/text"
prefix "$d/text-file" 0x03 32 0 0 "$work/text"
prefix "$d/text-bytes" 0x04 8 0 0 "$work/text"
shard "$work/bad.bin" 256 10 20240520 2
prefix "$d/wrong-version" 0x00 4 0 0 "$work/bad.bin"

# ---- fuzz_fingerprint: byte 0 = reader (0 table, 1 diff), bytes 1-2 = where file A ends
d=$out/fuzz_fingerprint; mkdir -p "$d"
for gen in v100 a100 h100 b200; do "$bin" probe --model $gen --json "$work/$gen.jsonl" >/dev/null; done
prefix "$d/table-a100" 0 0 0 "$work/a100.jsonl"
head -n 12 "$work/h100.jsonl" >"$work/h100-head"
prefix "$d/table-h100-head" 0 0 0 "$work/h100-head"
head -n 12 "$work/v100.jsonl" >"$work/v100-head"
cat "$work/v100-head" "$work/h100-head" >"$work/both"
n=$(wc -c <"$work/v100-head")
prefix "$d/diff-v100-h100-heads" 1 $((n & 255)) $((n >> 8)) "$work/both"
cat "$work/a100.jsonl" "$work/b200.jsonl" >"$work/both"
n=$(wc -c <"$work/a100.jsonl")
prefix "$d/diff-a100-b200" 1 $((n & 255)) $((n >> 8)) "$work/both"

# ---- fuzz_json: records ulpscope writes and reads back ---------------------------------
d=$out/fuzz_json; mkdir -p "$d"
"$bin" compare --steps 2 --depth 1 --width 8 --heads 2 --seq 4 --batch 1 --seeds 2 --arm x=lm_head=fp32 \
    --results "$work/cmp" --json "$work/cmp.jsonl" --quiet >/dev/null 2>&1
cp "$work/cmp/recipe.json" "$d/compare-recipe.json"
head -n 1 "$work/cmp/runs.jsonl" >"$d/compare-run"
head -n 3 "$work/cmp/runs.jsonl" >"$d/compare-runs-3-lines"
grep '"record":"arm"' "$work/cmp.jsonl" | head -n 1 >"$d/compare-arm" || true
head -n 1 "$work/a100.jsonl" >"$d/fingerprint-header"
sed -n 2p "$work/a100.jsonl" >"$d/fingerprint-params"
cp "$out/fuzz_plan_json/modern-layers.json" "$d/plan.json"
printf '{"a":[1,-2.5e-3,"nan","inf","-inf",true,false,null],"s":"\\u00e9\\ud83d\\ude00\\n","seed":"0x5eed","n":18446744073709551615}' >"$d/escapes-and-numbers"
# ---- fuzz_trace: bytes 0-1 = where file A ends; trace files of `trace --record`
d=$out/fuzz_trace; mkdir -p "$d"
tiny="--depth 2 --width 32 --heads 2 --seq 32 --batch 2 --steps 4 --warmup 2 --val-batches 1 --quiet"
"$bin" trace $tiny --record "$work/ta.trace" --record-steps 3
"$bin" trace $tiny --set matmul=bf16:split_k --record "$work/tb.trace" --record-steps 3
# the parting step (2) keeps its op records; the others only their states
for f in ta tb; do grep -v '"record":"op","step":[01],' "$work/$f.trace" >"$work/$f.small"; done
cat "$work/ta.small" "$work/tb.small" >"$work/both"
n=$(wc -c <"$work/ta.small")
prefix "$d/parted" $((n & 255)) $((n >> 8)) "$work/both"
cat "$work/ta.small" "$work/ta.small" >"$work/both"
prefix "$d/agree" $((n & 255)) $((n >> 8)) "$work/both"
head -n 20 "$work/ta.small" >"$work/cut"
cat "$work/cut" "$work/tb.small" >"$work/both"
n=$(wc -c <"$work/cut")
prefix "$d/truncated" $((n & 255)) $((n >> 8)) "$work/both"

echo "make_corpus: $(find "$out" -type f | wc -l) seeds in $out"

# ---- regression inputs of fuzz_checkpoint: impossible headers ----------------------------
# The headers issue 9 found crashing `train --resume` (heads 0: SIGFPE; steps
# done -5: a write out of bounds; -1e9: SIGSEGV; a million layers, a negative
# width: allocation attempts), and the states fuzz_checkpoint found accepted
# by the reader before it checked them (more clean steps than steps, a loss
# scale of 0 or below), written into a real checkpoint of this format.  They
# live in fuzz/regressions/ (not rewritten with the corpus otherwise).
d=$here/fuzz/regressions/fuzz_checkpoint; mkdir -p "$d"
python3 - "$out/fuzz_checkpoint/gpt2-bf16" "$d" <<'PY'
import struct, sys
src, dst = sys.argv[1], sys.argv[2]
b = bytearray(open(src, "rb").read())   # a checkpoint without its checksum
CFG = 12                                # after "ULPSCKPT" and the u32 version
fields = ["kind", "layers", "width", "heads", "vocab", "context", "norm_gain"]
pos = CFG + 7 * 4 + 3 * 8
for _ in range(3):                      # plan now, plan at start, settings
    (n,) = struct.unpack_from("<I", b, pos)
    pos += 4 + n
STATE = pos                             # i64 steps done, f64 loss scale, i64 clean steps
def variant(name, edits):
    v = bytearray(b)
    for fmt, off, val in edits:
        struct.pack_into(fmt, v, off, val)
    open("%s/%s" % (dst, name), "wb").write(v)
i32 = lambda f: CFG + 4 * fields.index(f)
variant("heads-0", [("<i", i32("heads"), 0)])
variant("layers-1e6", [("<i", i32("layers"), 1000000)])
variant("width-negative", [("<i", i32("width"), -64)])
variant("steps-done-minus-5", [("<q", STATE, -5)])
variant("steps-done-minus-1e9", [("<q", STATE, -1000000000)])
variant("clean-steps-past-steps-done", [("<q", STATE + 16, 5)])
variant("loss-scale-0", [("<d", STATE + 8, 0.0)])
variant("loss-scale-negative", [("<d", STATE + 8, -3.1e231)])
variant("loss-scale-nan", [("<d", STATE + 8, float("nan"))])
PY
