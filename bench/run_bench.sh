#!/bin/sh
# bench/run_bench.sh BUILD BENCH... — run every benchmark binary; each prints
# its own table (GPU benchmarks say so and skip without a GPU).
set -u
build=$1; shift
status=0
for b in "$@"; do
    echo "== $b"
    "$b" || status=1
done
exit $status
