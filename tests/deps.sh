#!/bin/sh
# tests/deps.sh MODE "APT_PKGS" PYTHON [NVCC]
#   check         C build dependencies present? If not: install them when root
#                 (apt-get), else print the exact command and fail.
#   check-python  the notebooks' Python packages; pip-installs them when missing.
#   install       install everything missing (make deps), and PyTorch for the
#                 example examples/verify/rmsnorm_torch.py (Debian's python3-torch,
#                 for /usr/bin/python3; not a build dependency: without it the
#                 example is skipped, saying so).
mode=$1; pkgs=$2; python=${3:-python3}; nvcc=${4:-nvcc}
here=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc}

header_of() {
    case $1 in
    libmpfr-dev) echo "mpfr.h" ;;
    libgmp-dev) echo "gmp.h" ;;
    libcmocka-dev) echo "cmocka.h" ;;
    esac
}

missing_apt() {
    out=""
    for p in $pkgs; do
        h=$(header_of "$p")
        # cmocka.h needs these before it
        if ! printf '#include <stdarg.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <setjmp.h>\n#include <%s>\n' "$h" |
            $cc -E -x c - >/dev/null 2>&1; then
            out="$out $p"
        fi
    done
    echo $out
}

install_apt() {
    need=$(missing_apt)
    [ -z "$need" ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "deps: installing $need"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq $need >/dev/null || {
            echo "deps: apt-get install $need failed" >&2; return 1; }
    else
        echo "deps: missing $need; install them with:" >&2
        echo "    sudo apt-get install -y $need" >&2
        return 1
    fi
}

python_ok() {
    "$python" -c "import nbclient, nbformat, ipykernel, matplotlib, numpy" >/dev/null 2>&1
}

install_python() {
    python_ok && return 0
    echo "deps: installing the notebooks' Python packages (notebooks/requirements.txt)"
    "$python" -m pip install -q -r "$here/notebooks/requirements.txt" || {
        echo "deps: pip install failed; run: $python -m pip install -r notebooks/requirements.txt" >&2
        return 1; }
    "$python" -m ipykernel install --user --name python3 >/dev/null 2>&1 || true
}

torch_ok() {
    "$python" -c "import torch" >/dev/null 2>&1 || /usr/bin/python3 -c "import torch" >/dev/null 2>&1
}

# Never fails make deps: the example it serves is skipped without it.
install_torch() {
    torch_ok && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "deps: installing python3-torch (examples/verify/rmsnorm_torch.py)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq python3-torch >/dev/null && return 0
        echo "deps: apt-get install python3-torch failed: examples/verify/rmsnorm_torch.py will be skipped" >&2
    else
        echo "deps: no torch: examples/verify/rmsnorm_torch.py will be skipped; install it with:" >&2
        echo "    sudo apt-get install -y python3-torch" >&2
    fi
    return 0
}

case $mode in
check)
    if ! command -v "$nvcc" >/dev/null 2>&1 && [ ! -x "$nvcc" ]; then
        echo "deps: nvcc not found ($nvcc): ulpscope's kernels need the CUDA Toolkit to build" >&2
        echo "      (a GPU is not needed to build); install it or pass NVCC=/path/to/nvcc" >&2
        exit 1
    fi
    install_apt ;;
check-python) install_python ;;
install) install_apt && install_python && install_torch ;;
*) echo "deps.sh: unknown mode $mode" >&2; exit 2 ;;
esac
