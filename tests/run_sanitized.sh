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
#  protect_shadow_gap=0  the CUDA runtime maps memory at fixed addresses that fall
#                        in the gap ASan otherwise protects: without this,
#                        cudaGetDeviceCount() dies with a SEGV in libcuda/libcudart
#                        instead of reporting that there is no GPU.
#  detect_leaks=1        leaks are findings; tests/lsan.supp names the few
#                        allocations of the CUDA driver and runtime that live
#                        until exit by design.
export ASAN_OPTIONS="protect_shadow_gap=0:detect_leaks=1:abort_on_error=0:log_path=$logs/asan"
export LSAN_OPTIONS="suppressions=$here/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"

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
