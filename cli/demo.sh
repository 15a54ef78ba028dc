#!/bin/sh
# cli/demo.sh ULPSCOPE DIR — the main job on embedded defaults: every study,
# JSON Lines under DIR, a short readable summary on stdout.
set -eu
ulpscope=$1; dir=$2
mkdir -p "$dir"
