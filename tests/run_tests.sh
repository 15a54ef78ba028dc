#!/bin/sh
# tests/run_tests.sh BIN... — run CMocka test binaries and add up their
# results: one line per binary (name, passed/failed/skipped, seconds; with
# skips, the first reason given), the whole output of a binary that failed,
# and last the summary line CI reads, `tests: N passed, N failed, N skipped`.
# A binary that dies before its summary counts as a failure.
# With ULPSCOPE_REQUIRE_GPU=1 the GPU tests fail instead of skipping.
passed=0; failed=0; skipped=0; broken=""
log=$(mktemp); trap 'rm -f "$log"' EXIT
for bin in "$@"; do
    t0=$(date +%s.%N)
    "$bin" >"$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    p=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test(s)\..*/\1/p' "$log" | tail -n 1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | tail -n 1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" | tail -n 1)
    why=""
    [ -n "$s" ] && why=$(grep -m 1 -i 'skipping' "$log" | cut -c 1-100)
    awk -v n="$(basename "$bin")" -v p="${p:-0}" -v f="${f:-0}" -v s="${s:-0}" -v a="$t0" -v b="$t1" -v w="$why" \
        'BEGIN { printf "%-32s %4d passed, %d failed, %d skipped %7.1f s%s\n", n, p, f, s, b - a, w != "" ? "  (" w ")" : "" }'
    if [ -z "$p" ] && [ -z "$f" ]; then
        cat "$log"
        echo "!! $bin ended (status $rc) without a CMocka summary"
        failed=$((failed + 1)); broken="$broken $bin"; continue
    fi
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
    if [ -n "$f" ] || [ "$rc" -ne 0 ]; then
        echo "---- $bin (status $rc): its whole output"
        cat "$log"
        echo "---- end of $bin"
        [ -z "$f" ] && failed=$((failed + 1))
        broken="$broken $bin"
    fi
done
[ -n "$broken" ] && echo "failing:$broken"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
