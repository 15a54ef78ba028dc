#!/bin/sh
# tests/verify_examples.sh MAKE BUILD CC PYTHON — make verify-examples (make test runs it):
#  1. make install into a fresh scratch prefix (and once more with DESTDIR, whose
#     files must land under DESTDIR/PREFIX and nowhere else);
#  2. the README's example test of a toy kernel (examples/verify/toy_rmsnorm_test.c)
#     built with `pkg-config --cflags --libs ulpscope` against that prefix, run:
#     the correct kernel passes, its bf16-accumulating twin must fail;
#  3. the NumPy example (examples/verify/rmsnorm_numpy.py): a correct bf16 RMSNorm
#     PASSes `ulpscope verify`, one accumulating in bf16 FAILs with that named;
#  4. the PyTorch example (examples/verify/rmsnorm_torch.py): the same with the
#     kernels written in PyTorch on the CPU, dumped as safetensors.  It runs with
#     PYTHON when that imports torch, else with the system /usr/bin/python3
#     (Debian's python3-torch, which make deps installs, is built for it).
# Prints one line per stage; any failure prints its log and exits 1.
make=$1; build=$2; cc=$3; python=$4
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
die() { echo "!! verify-examples: $1"; [ -f "$work/log" ] && cat "$work/log"; exit 1; }

prefix=$work/prefix
$make --no-print-directory -C "$here" BUILD="$build" PREFIX="$prefix" install >"$work/log" 2>&1 || die "make install failed"
for f in lib/libulpscope.a lib/libulpscope.so lib/libulpscope.so.2 include/ulpscope/verify.h include/ulpscope/unit.h lib/pkgconfig/ulpscope.pc; do
    [ -f "$prefix/$f" ] || die "make install did not put $f under PREFIX"
done
$make --no-print-directory -C "$here" BUILD="$build" PREFIX=/opt/ulpscope DESTDIR="$work/stage" install >"$work/log" 2>&1 ||
    die "make install DESTDIR=... failed"
[ -f "$work/stage/opt/ulpscope/lib/pkgconfig/ulpscope.pc" ] && [ -f "$work/stage/opt/ulpscope/include/ulpscope/unit.h" ] ||
    die "make install did not honour DESTDIR"
grep -q '^prefix=/opt/ulpscope$' "$work/stage/opt/ulpscope/lib/pkgconfig/ulpscope.pc" || die "the .pc file of a DESTDIR install names the wrong prefix"
echo "verify-examples: make install into a fresh prefix and with DESTDIR: ok"

# The example as a user builds it: only the installed prefix, through pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs ulpscope) || die "pkg-config does not find ulpscope"
cp "$here/examples/verify/toy_rmsnorm_test.c" "$work/"
(cd "$work" && $cc -std=c11 -Wall -Wextra -o toy_test toy_rmsnorm_test.c $flags -lcmocka -lm) >"$work/log" 2>&1 ||
    die "the example test does not build against the installed library"
"$work/toy_test" >"$work/log" 2>&1 || die "the example test failed"
grep -q '2 test(s)' "$work/log" && grep -q 'PASSED.*2 test' "$work/log" || die "the example test did not pass both tests"
echo "verify-examples: toy_rmsnorm_test.c built with pkg-config against the prefix: 2 tests passed (the bf16-accumulator twin fails its check)"
# The twin of the assertion itself: the macro must fail a CMocka test on the bf16 accumulator.
sed 's/toy_rmsnorm(x, gain, y, 0);/toy_rmsnorm(x, gain, y, 1);/' "$work/toy_rmsnorm_test.c" >"$work/toy_twin.c"
(cd "$work" && $cc -std=c11 -o toy_twin toy_twin.c $flags -lcmocka -lm) >"$work/log" 2>&1 || die "the twin does not build"
if "$work/toy_twin" >"$work/log" 2>&1 || ! grep -q 'ulp_assert_within_bound(rmsnorm) failed' "$work/log"; then
    die "ulp_assert_within_bound passed a bf16-accumulating kernel"
fi
echo "verify-examples: ulp_assert_within_bound fails the bf16-accumulating twin"

if "$python" -c "import numpy" >/dev/null 2>&1; then
    "$python" "$here/examples/verify/rmsnorm_numpy.py" "$build/ulpscope" "$work/npy" >"$work/log" 2>&1 ||
        die "examples/verify/rmsnorm_numpy.py: unexpected verdict"
    echo "verify-examples: rmsnorm_numpy.py: correct bf16 RMSNorm PASS, bf16 accumulator FAIL (named) ($(head -n 1 "$work/log" | sed 's/.*, //'))"
else
    echo "verify-examples: skipping rmsnorm_numpy.py: no numpy for $python (make deps installs it)"
fi

torch_python=""
for p in "$python" /usr/bin/python3; do
    if "$p" -c "import torch" >/dev/null 2>&1; then torch_python=$p; break; fi
done
if [ -n "$torch_python" ]; then
    "$torch_python" "$here/examples/verify/rmsnorm_torch.py" "$build/ulpscope" "$work/torch" >"$work/log" 2>&1 ||
        die "examples/verify/rmsnorm_torch.py ($torch_python): unexpected verdict"
    echo "verify-examples: rmsnorm_torch.py: correct bf16 RMSNorm PASS, bf16 accumulator FAIL (named) ($(head -n 1 "$work/log" | sed 's/.*, //'), $torch_python)"
else
    echo "verify-examples: skipping rmsnorm_torch.py: no torch for $python or /usr/bin/python3 (make deps installs python3-torch)"
fi
