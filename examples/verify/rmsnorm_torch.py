#!/usr/bin/env python3
"""A bf16 RMSNorm written in PyTorch (on the CPU), its tensors dumped as
safetensors and judged by `ulpscope verify rmsnorm`.

Two kernels, both taking and returning bf16 tensors:
  correct  x.float(), mean of squares in fp32, rsqrt, y = x rstd gain in
           fp32 rounded to bf16 once (Gemma's placement): what most
           PyTorch RMSNorm modules do;
  planted  the same, except that the sum of squares is kept in a bf16
           running sum (rounded to bf16 after every addition).
Declared to ulpscope as what the correct one is (--accum fp32 --upcast
gemma --reduce sequential: the longest rounding chain, which bounds
whatever order torch's reduction takes), the correct kernel must PASS and
the planted one must FAIL, with its error named (the outputs fit a bf16
accumulation).

Needs only torch (no numpy: Debian's python3-torch 1.13 and a pip numpy 2
do not interoperate); the safetensors files are written by hand.

Without torch it prints "rmsnorm_torch: skipped: no torch" and exits 0.

usage: rmsnorm_torch.py ULPSCOPE OUTDIR [--seed S]
Exit status 0 when both verdicts are as expected, 1 when not, 2 on bad
usage."""
import json
import os
import struct
import subprocess
import sys

try:
    import torch
except ImportError:
    print("rmsnorm_torch: skipped: no torch for %s (Debian: apt-get install python3-torch, for /usr/bin/python3)"
          % sys.executable)
    sys.exit(0)


def rmsnorm(x, gain, eps):
    """x (N, C), gain (C) bf16 -> y bf16, rstd fp32 (N)."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1) + eps)
    y = (xf * rstd[:, None] * gain.float()).bfloat16()
    return y, rstd


def rmsnorm_bf16_sum(x, gain, eps):
    """The planted bug: the sum of squares in a bf16 running sum."""
    xf = x.float()
    ss = torch.zeros(x.shape[0], dtype=torch.bfloat16)
    for c in range(x.shape[1]):
        ss = (ss.float() + xf[:, c] * xf[:, c]).bfloat16()  # the square is exact in fp32; the sum rounds to bf16
    rstd = torch.rsqrt(ss.float() / x.shape[1] + eps)
    y = (xf * rstd[:, None] * gain.float()).bfloat16()
    return y, rstd


def save_safetensors(path, tensors):
    """tensors: name -> bf16 or fp32 torch tensor.  The format: an 8-byte
    little-endian header length, a JSON header (dtype, shape, data_offsets
    per tensor, padded with spaces to 8 bytes), then the raw little-endian
    bytes in that order."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        raw = bytes(t.reshape(-1).view(torch.uint8).tolist())  # the element bytes, as the host holds them
        dtype = {torch.bfloat16: "BF16", torch.float32: "F32"}[t.dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    if sys.byteorder != "little":
        print("rmsnorm_torch: safetensors are little-endian; this host is not", file=sys.stderr)
        return 2
    args = sys.argv[1:]
    seed = 1234
    if "--seed" in args:
        i = args.index("--seed")
        if i + 1 >= len(args):
            print(__doc__.strip().splitlines()[-3], file=sys.stderr)
            return 2
        seed = int(args[i + 1], 0)
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    ulpscope, outdir = args
    N, C, eps = 64, 64, 1e-5
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(N, C, generator=gen).bfloat16()
    gain = (1 + 0.25 * torch.randn(C, generator=gen)).bfloat16()
    print("rmsnorm_torch: seed %d, N=%d C=%d, torch %s" % (seed, N, C, torch.__version__))
    ok = True
    for name, kernel in (("correct", rmsnorm), ("planted", rmsnorm_bf16_sum)):
        y, rstd = kernel(x, gain, eps)
        d = os.path.join(outdir, name)
        os.makedirs(d, exist_ok=True)
        save_safetensors(os.path.join(d, "inputs.safetensors"), {"x": x, "gain": gain})
        save_safetensors(os.path.join(d, "outputs.safetensors"), {"y": y, "rstd": rstd})
        cmd = [ulpscope, "verify", "rmsnorm", "--path", "bf16", "--accum", "fp32", "--reduce", "sequential",
               "--upcast", "gemma", "--inputs", os.path.join(d, "inputs.safetensors"),
               "--outputs", os.path.join(d, "outputs.safetensors")]
        print("$ " + " ".join(cmd))
        run = subprocess.run(cmd, capture_output=True, text=True)
        print(run.stdout + run.stderr, end="")
        expected = 0 if name == "correct" else 1
        if run.returncode != expected:
            print("rmsnorm_torch: %s kernel: exit status %d, expected %d" % (name, run.returncode, expected))
            ok = False
        if name == "planted" and "accumulates in bf16" not in run.stdout:
            print("rmsnorm_torch: the planted kernel's report does not name the bf16 accumulation")
            ok = False
    print("rmsnorm_torch: %s" % ("both verdicts as expected" if ok else "UNEXPECTED VERDICT"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
