#!/bin/sh
# tests/run_sanitized.sh BUILD BIN... — run the test suite built with ASan and
# UBSan (make sanitize).  Every process the tests start (ulpscope through
# ULPSCOPE_BIN included) writes its sanitizer reports to BUILD/sanitizer-logs/
# rather than to stderr, so that a report from a child process counts even
# when the test only looked at its exit status, and a test that compares
# stderr is not disturbed.  Fails when a test fails or any report was written.
build=$1; shift
logs=$(cd "$build" && pwd)/sanitizer-logs
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$logs" && mkdir -p "$logs" || exit 1

# ASan:
#  protect_shadow_gap=0  the CUDA driver reserves address space at fixed addresses
#                        inside the gap ASan protects; with the gap protected the
#                        driver's first allocation fails (cudaErrorMemoryAllocation,
#                        google/sanitizers#629).  Without a GPU driver (CI) the
#                        runtime stops earlier and this changes nothing; it is set
#                        for make sanitize on a GPU machine, where GPU tests run.
#  detect_leaks=1        leaks are findings; tests/lsan.supp names the CUDA
#                        libraries, whose allocations live until exit by design.
export ASAN_OPTIONS="protect_shadow_gap=0:detect_leaks=1:abort_on_error=0:log_path=$logs/asan"
export LSAN_OPTIONS="suppressions=$here/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"

# Twins: each planted bug, run with stderr discarded, must leave its report in
# the log directory, or reports of the processes the tests start could be lost.
for kind in asan:AddressSanitizer ubsan:runtime.error leak:LeakSanitizer; do
    name=${kind%%:*}; pattern=${kind#*:}
    "$build/tests/sanitize_twin" "$name" 2>/dev/null >/dev/null
    rc=$?
    if [ "$rc" -eq 0 ] || ! grep -lq "$pattern" "$logs"/* 2>/dev/null; then
        echo "sanitize: FAILED: the planted $name bug (tests/sanitize_twin.c) left no report in $logs (status $rc)"
        exit 1
    fi
    rm -f "$logs"/*
done
echo "sanitize: planted asan, ubsan and leak bugs reported (tests/sanitize_twin.c)"

status=$build/sanitize-status
{ ULPSCOPE_BIN=$(cd "$build" && pwd)/ulpscope sh "$here/tests/run_tests.sh" "$@"; echo $? >"$status"; } 2>&1 |
    sed 's/^tests: /sanitize: tests: /'
rc=$(cat "$status"); rm -f "$status"

# A process started under a virtual-memory limit (ulimit -v: test_train_outputs
# checks that the memory refusal names it) cannot map ASan's shadow and stops
# before main; that test skips the case visibly.  Its note is no finding.
for f in $(grep -l 'ReserveShadowMemoryRange failed' "$logs"/* 2>/dev/null); do
    echo "sanitize: a process could not start under ASan (virtual memory limited: ulimit -v); not counted"
    rm -f "$f"
done
reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
    for f in $reports; do
        echo "== sanitizer report $f"
        cat "$f"
    done
    echo "sanitize: $(echo "$reports" | wc -l) sanitizer report(s) (above; files in $logs)"
    exit 1
fi
[ "$rc" -eq 0 ] || exit 1
echo "sanitize: no sanitizer reports"
