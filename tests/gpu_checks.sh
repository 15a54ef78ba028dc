#!/bin/sh
# tests/gpu_checks.sh BUILD — the GPU-only part of make test-gpu: the whole
# kernel check matrix, then compute-sanitizer memcheck and racecheck.
set -eu
build=$1
