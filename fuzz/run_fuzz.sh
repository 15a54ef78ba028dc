#!/bin/sh
# fuzz/run_fuzz.sh BUILD SECONDS TARGET... — make fuzz.  Each target runs for
# SECONDS on a scratch copy of its seed corpus fuzz/corpus/TARGET/ (the
# inputs it adds stay in BUILD/fuzz-work/TARGET/corpus, the repository's
# corpus is left as it is), then every file of fuzz/regressions/TARGET/ goes
# through it once.  A crash, a sanitizer report, a leak, an input slower than
# 10 s or an allocation past 2 GiB fails the target; libFuzzer saves the
# input in BUILD/fuzz-work/TARGET/ and this script names it.
build=$1; secs=$2; shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
# protect_shadow_gap=0 as in tests/run_sanitized.sh (the CUDA runtime is
# linked in, though no target starts it).
export ASAN_OPTIONS="protect_shadow_gap=0:detect_leaks=1"
export LSAN_OPTIONS="suppressions=$here/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=""
for t in "$@"; do
    bin=$build/fuzz/$t
    work=$build/fuzz-work/$t
    rm -rf "$work" && mkdir -p "$work/corpus" "$work/tmp" || exit 1
    if [ -d "$here/fuzz/corpus/$t" ]; then cp "$here/fuzz/corpus/$t"/* "$work/corpus/" 2>/dev/null; fi
    seeds=$(ls "$work/corpus" | wc -l)
    TMPDIR=$work/tmp "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" >"$work/log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -n 1)
    if [ "$rc" -ne 0 ]; then
        echo "!! fuzz $t: failed (status $rc) after ${runs:-?} runs; the end of $work/log:"
        tail -n 60 "$work/log"
        for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
            [ -e "$a" ] && echo "!! fuzz $t: reproduce with $bin $a"
        done
        failed="$failed $t"
        continue
    fi
    regs=0
    if [ -d "$here/fuzz/regressions/$t" ] && [ -n "$(ls "$here/fuzz/regressions/$t")" ]; then
        regs=$(ls "$here/fuzz/regressions/$t" | wc -l)
        if ! TMPDIR=$work/tmp "$bin" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
            "$here/fuzz/regressions/$t"/* >"$work/regressions.log" 2>&1; then
            echo "!! fuzz $t: a regression input fails again; the end of $work/regressions.log:"
            tail -n 60 "$work/regressions.log"
            failed="$failed $t"
            continue
        fi
    fi
    echo "fuzz $t: ${runs:-?} runs in $secs s from $seeds seeds, ${cov:-cov: ?} edges, corpus now $(ls "$work/corpus" | wc -l); $regs regression inputs pass"
done
if [ -n "$failed" ]; then
    echo "fuzz: failed:$failed"
    exit 1
fi
echo "fuzz: $# targets, no findings"
