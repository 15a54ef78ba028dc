#!/usr/bin/env python3
"""Dump the tensors of a bf16 RMSNorm and verify them with `ulpscope verify`.

Two kernels, both storing x, gain and y in bf16:
  correct  the sum of squares accumulated in fp32, every step in fp32, y
           rounded to bf16 once (Gemma's placement);
  planted  the same, except that the running sum is rounded to bf16 after
           every addition (a bf16 accumulator).
Declared to ulpscope as what the correct one is (--accum fp32 --reduce
sequential --upcast gemma), the correct kernel must PASS and the planted one
must FAIL, with its error named (the outputs fit a bf16 accumulation).

With PyTorch importable (and --torch), the kernels are written in PyTorch
(CPU, bf16 tensors); otherwise NumPy emulates them bit for bit: bf16
rounding is done on the float32 bit patterns (round to nearest even), and
every float32 operation is a NumPy float32 operation (IEEE, rounded once).

usage: rmsnorm_numpy.py ULPSCOPE OUTDIR [--torch] [--seed S]
Exit status 0 when both verdicts are as expected."""
import os
import subprocess
import sys

import numpy as np


def bf16_round(a):
    """float32 values rounded to the nearest bf16 (ties to even), as float32."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def bf16_bits(a):
    """bf16 values (held exactly in float32) as their uint16 patterns."""
    return (np.asarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def rmsnorm_numpy(x, gain, eps, bf16_accumulator):
    """x (N, C), gain (C): bf16 values in float32 arrays.  Returns y (bf16
    values) and rstd (float32), as the kernel computes them."""
    f32 = np.float32
    ss = np.zeros(x.shape[0], dtype=f32)
    for c in range(x.shape[1]):              # one thread per row, left to right
        ss = (ss + x[:, c] * x[:, c]).astype(f32)   # x*x is exact in fp32 for bf16 x
        if bf16_accumulator:
            ss = bf16_round(ss)              # the planted bug: a bf16 running sum
    ms = (ss / f32(x.shape[1])).astype(f32)
    t = (ms + f32(eps)).astype(f32)
    rstd = (f32(1) / np.sqrt(t)).astype(f32)  # sqrt and the division each round once
    xn = (x * rstd[:, None]).astype(f32)
    y = bf16_round((xn * gain[None, :]).astype(f32))
    return y, rstd


def rmsnorm_torch(torch, x, gain, eps, bf16_accumulator):
    """The same kernel in PyTorch on the CPU (bf16 storage, fp32 compute)."""
    xf, gf = x.float(), gain.float()
    ss = torch.zeros(x.shape[0], dtype=torch.float32)
    for c in range(x.shape[1]):
        ss = ss + xf[:, c] * xf[:, c]
        if bf16_accumulator:
            ss = ss.bfloat16().float()
    rstd = 1.0 / torch.sqrt(ss / x.shape[1] + eps)
    y = ((xf * rstd[:, None]) * gf[None, :]).bfloat16()
    return y, rstd


def main():
    args = sys.argv[1:]
    use_torch = "--torch" in args
    seed = 1234
    if "--seed" in args:
        seed = int(args[args.index("--seed") + 1], 0)
    positional = [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] != "--seed")]
    if len(positional) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    ulpscope, outdir = positional
    os.makedirs(outdir, exist_ok=True)
    N, C, eps = 64, 64, np.float32(1e-5)
    rng = np.random.default_rng(seed)
    print("rmsnorm_numpy: seed %d, N=%d C=%d, %s" % (seed, N, C, "PyTorch" if use_torch else "NumPy emulation"))
    x = bf16_round(rng.standard_normal((N, C)).astype(np.float32))
    gain = bf16_round((1 + 0.25 * rng.standard_normal(C)).astype(np.float32))
    ok = True
    for name, planted in (("correct", False), ("planted", True)):
        if use_torch:
            import torch
            y, rstd = rmsnorm_torch(torch, torch.from_numpy(x).bfloat16(), torch.from_numpy(gain).bfloat16(),
                                    float(eps), planted)
            y, rstd = y.float().numpy(), rstd.numpy()
        else:
            y, rstd = rmsnorm_numpy(x, gain, eps, planted)
        d = os.path.join(outdir, name)
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "x.npy"), x)                 # bf16 values as float32
        np.save(os.path.join(d, "gain.npy"), bf16_bits(gain)) # bf16 as uint16 patterns
        np.save(os.path.join(d, "y.npy"), bf16_bits(y))
        np.save(os.path.join(d, "rstd.npy"), rstd)
        cmd = [ulpscope, "verify", "rmsnorm", "--path", "bf16", "--accum", "fp32", "--reduce", "sequential",
               "--upcast", "gemma", "--inputs", "x=%s/x.npy,gain=%s/gain.npy" % (d, d),
               "--outputs", "y=%s/y.npy,rstd=%s/rstd.npy" % (d, d)]
        print("$ " + " ".join(cmd))
        run = subprocess.run(cmd, capture_output=True, text=True)
        print(run.stdout + run.stderr, end="")
        expected = 0 if name == "correct" else 1
        if run.returncode != expected:
            print("rmsnorm_numpy: %s kernel: exit status %d, expected %d" % (name, run.returncode, expected))
            ok = False
        if planted and "accumulates in bf16" not in run.stdout:
            print("rmsnorm_numpy: the planted kernel's report does not name the bf16 accumulation")
            ok = False
    print("rmsnorm_numpy: %s" % ("both verdicts as expected" if ok else "UNEXPECTED VERDICT"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
