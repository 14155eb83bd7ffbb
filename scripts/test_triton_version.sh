#!/usr/bin/env bash
# Run the recorder's tests under another Triton release, in a throwaway venv beside the checkout.
# Usage: scripts/test_triton_version.sh 3.6.0 [pytest args...]   (CI tests the primary version, 3.8)
set -euo pipefail
version=${1:?usage: $0 TRITON_VERSION [pytest args...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-triton-$version"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch==2.13.0 "triton==$version" -e "$root[dev]"
fi
"$venv/bin/python" -c "import triton; print('triton', triton.__version__)"
cd "$root"
exec "$venv/bin/python" -m pytest -n auto -p no:cacheprovider "$@"
