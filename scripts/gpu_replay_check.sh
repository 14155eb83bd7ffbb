#!/usr/bin/env bash
# On a CUDA machine, from the repository root: record the examples on CUDA tensors, replay them on cuda and
# cpu, run the replay tests with the CUDA ones enabled, and measure CPU replay cost (BENCH=0 skips that).
# Output goes to $OUT (default ./gpu-replay-out).
# Wheels for packages the machine lacks (sqlalchemy, alembic, mako, greenlet, and numpy<2.4 for Triton 3.6's
# interpreter) are taken from $WHEELS (default .whl-replay) when that folder exists.
set -uo pipefail
OUT=${OUT:-gpu-replay-out}
WHEELS=${WHEELS:-.whl-replay}
mkdir -p "$OUT"
if [ -d "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 2
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)" | tee -a "$OUT/gpu.txt"
python3 scripts/gpu_replay_check.py "$OUT" 2>&1 | tee "$OUT/check.log"
check=${PIPESTATUS[0]}
python3 -m pytest -q -p no:cacheprovider -rs tests/end_to_end/test_replay.py 2>&1 | tee "$OUT/pytest.log"
tests=${PIPESTATUS[0]}
if [ "${BENCH:-1}" = 1 ]; then
  python3 scripts/bench_replay.py --json "$OUT/bench_replay.json" 2>&1 | tee "$OUT/bench_replay.md"
fi
echo "check exit $check, tests exit $tests" | tee -a "$OUT/gpu.txt"
exit $(( check > tests ? check : tests ))
