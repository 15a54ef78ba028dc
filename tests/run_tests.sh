#!/bin/sh
# tests/run_tests.sh BIN... — run CMocka test binaries and add up their
# results.  A binary that dies before its summary counts as a failure.
# With ULPSCOPE_REQUIRE_GPU=1 the GPU tests fail instead of skipping.
passed=0; failed=0; skipped=0; broken=""
log=$(mktemp); trap 'rm -f "$log"' EXIT
for bin in "$@"; do
    echo "== $bin"
    t0=$(date +%s.%N)
    "$bin" >"$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    cat "$log"
    awk -v a="$t0" -v b="$t1" -v n="$bin" 'BEGIN { printf "== %s: %.1f s\n", n, b - a }'
    p=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test(s)\..*/\1/p' "$log" | tail -n 1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | tail -n 1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | tail -n 1)
    if [ -z "$p" ] && [ -z "$f" ]; then
        echo "!! $bin ended (status $rc) without a CMocka summary"
        failed=$((failed + 1)); broken="$broken $bin"; continue
    fi
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
    if [ "$rc" -ne 0 ] && [ -z "$f" ]; then failed=$((failed + 1)); broken="$broken $bin"; fi
    [ -n "$f" ] && broken="$broken $bin"
done
[ -n "$broken" ] && echo "failing:$broken"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
