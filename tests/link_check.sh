#!/bin/sh
# tests/link_check.sh CXX BUILD "LIBS" MAIN_O "TRAINER_LIBS" CHECK_LIB
# The trainer's floor must link, whole (--whole-archive: every object, not
# only those the tiny main reaches), against base, precision and kernels
# without the check harness, the references or MPFR, and run.  Twin: the
# same link with the check harness added must fail (it needs the MPFR
# references), or this check could not see a harness dependency creep in.
set -u
cxx=$1; build=$2; libs=$3; main_o=$4; trainer_libs=$5; check_lib=$6
out=$build/link-check
mkdir -p "$out"
if ! $cxx -o "$out/trainer_only" "$main_o" -Wl,--whole-archive $trainer_libs -Wl,--no-whole-archive $libs \
        >"$out/link.log" 2>&1; then
    echo "link-check: FAILED: the trainer does not link without the check harness and MPFR:"
    grep -m 5 "undefined reference" "$out/link.log" || tail -n 5 "$out/link.log"
    exit 1
fi
if ! "$out/trainer_only" >"$out/run.log" 2>&1; then
    echo "link-check: FAILED: the trainer-only program did not run:"; tail -n 5 "$out/run.log"; exit 1
fi
if $cxx -o "$out/with_harness" "$main_o" -Wl,--whole-archive $trainer_libs "$check_lib" -Wl,--no-whole-archive \
        $libs >"$out/twin.log" 2>&1; then
    echo "link-check: FAILED: the twin (check harness added, no MPFR) linked, so this check cannot see the harness"
    exit 1
fi
missing=$(grep -c "undefined reference" "$out/twin.log")
echo "link-check: trainer links and runs without the check harness and MPFR;" \
     "twin with the harness fails ($missing undefined references)"
