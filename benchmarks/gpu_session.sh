#!/usr/bin/env bash
# Every GPU check in one command, for a lent GPU machine's few minutes (benchmarks/README.md).
# Run from the repository root with $OUT set and .ci/cache/gpu-wheels carried there:
#
#     bash benchmarks/gpu_session.sh
#
# Most important first, each under its own time limit, so that a check that hangs or runs
# long costs only its own share and what came before is already in $OUT: the monitor's cost
# on the GPU (issue 31), the reader against nvidia-smi, the cupy-plugin path, then the
# sharded path. Each writes its JSON to $OUT, and everything printed goes to $OUT/session.log
# too (at most 8 files come back from the machine); this script exits 0 once all have had
# their turn, whatever they found.
set -uo pipefail
export PYTHONUNBUFFERED=1
out=${OUT:?set OUT to the folder the results go to}

# The two wheels the machine may lack (it has no network), fetched beforehand with:
#   python -m pip download -q --no-deps -d .ci/cache/gpu-wheels nvidia-ml-py psutil
python -c "import pynvml, psutil" 2>/dev/null \
  || python -m pip install -q --no-index --find-links .ci/cache/gpu-wheels nvidia-ml-py psutil

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv
  python - <<'EOF'
import importlib, platform
print("python", platform.python_version())
for name in ("pynvml", "torch", "cupy", "psutil", "numpy"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except ImportError:
        print(name, "missing")
EOF
} 2>&1 | tee "$out/session.log"

check() {  # name, seconds, command...
  local name=$1 seconds=$2
  shift 2
  echo "=== $name (at most ${seconds} s)" | tee -a "$out/session.log"
  timeout --kill-after=10 "$seconds" "$@" 2>&1 | tee -a "$out/session.log"
  echo "=== $name: exit ${PIPESTATUS[0]}" | tee -a "$out/session.log"
}

check gpu_cost 360 python benchmarks/monitor_gpu_cost.py --json "$out/gpu_cost.json"
check gpu_truth 120 python benchmarks/gpu_truth.py --phase-seconds 15 --out "$out"
check gpu_check 45 env OUT="$out" python benchmarks/gpu_check.py --quick
check shard_gpu_check 40 env OUT="$out" python benchmarks/shard_gpu_check.py --iterations 10
exit 0
