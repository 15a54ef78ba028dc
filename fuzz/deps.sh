#!/bin/sh
# fuzz/deps.sh CC "APT_PKGS" — the fuzz build's compiler: CC must link a
# libFuzzer target (-fsanitize=fuzzer,address,undefined).  When it cannot:
# install APT_PKGS when root (apt-get), else print the command and fail.
cc=$1; pkgs=$2
can_link() {
    tmp=$(mktemp -d) || return 1
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d && n > 9; }\n' >"$tmp/t.c"
    "$cc" -fsanitize=fuzzer,address,undefined "$tmp/t.c" -o "$tmp/t" >/dev/null 2>&1
    ok=$?
    rm -rf "$tmp"
    return $ok
}
can_link && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing $pkgs (the fuzz targets' compiler and libFuzzer)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq $pkgs >/dev/null || {
        echo "deps: apt-get install $pkgs failed" >&2; exit 1; }
    can_link && exit 0
    echo "deps: $cc still cannot link a libFuzzer target after installing $pkgs" >&2
    exit 1
fi
echo "deps: $cc cannot link a libFuzzer target (make fuzz); install with:" >&2
echo "    sudo apt-get install -y $pkgs" >&2
exit 1
