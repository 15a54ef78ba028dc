#!/bin/sh
# notebooks/run_notebooks.sh ULPSCOPE PYTHON — write fresh CPU results (seconds)
# and execute every notebook against them; executed copies go to
# notebooks/.executed/.  Any cell error fails the run.
set -eu
ulpscope=$1; python=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
results=$(mktemp -d); trap 'rm -rf "$results"' EXIT
sh "$here/make_results.sh" "$ulpscope" "$results"
mkdir -p "$here/.executed"
status=0
for nb in "$here"/*.ipynb; do
    [ -e "$nb" ] || continue
    name=$(basename "$nb")
    if ULPSCOPE_RESULTS="$results" MPLBACKEND=Agg "$python" - "$nb" "$here/.executed/$name" <<'PY'
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=300, kernel_name="python3").execute()
nbformat.write(nb, sys.argv[2])
PY
    then echo "notebook ok: $name"
    else echo "notebook FAILED: $name"; status=1
    fi
done
exit $status
