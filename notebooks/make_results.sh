#!/bin/sh
# notebooks/make_results.sh ULPSCOPE DIR — the result files the notebooks read,
# written on the CPU in seconds.  Each study adds its line here.
set -eu
ulpscope=$1; dir=$2
mkdir -p "$dir"
