#!/usr/bin/env bash
# Run the recorder's tests under another Triton release (and numpy release), in a throwaway venv beside the
# checkout. CI tests the primary version, 3.8, with whatever numpy pip resolves.
# Usage: scripts/test_triton_version.sh TRITON_VERSION [--numpy NUMPY_VERSION] [pytest args...]
#   scripts/test_triton_version.sh 3.6.0 --numpy 2.4.6 tests/end_to_end/test_core.py
# Without --numpy, pip picks the newest numpy the project allows. The venv is reused on later calls
# (.venv-triton-VERSION[-numpy-VERSION]); delete it to rebuild.
set -euo pipefail
usage="usage: $0 TRITON_VERSION [--numpy NUMPY_VERSION] [pytest args...]"
version=${1:?$usage}
shift
numpy_spec=numpy
suffix=""
if [ "${1:-}" = "--numpy" ]; then
  numpy_spec="numpy==${2:?$usage}"
  suffix="-numpy-$2"
  shift 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-triton-$version$suffix"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.13.0 "triton==$version" "$numpy_spec" -e "$root[dev]"
fi
"$venv/bin/python" -c "import numpy, triton, typer; print('triton', triton.__version__, 'numpy', numpy.__version__)"
cd "$root"
exec "$venv/bin/python" -m pytest -n auto -p no:cacheprovider "$@"
