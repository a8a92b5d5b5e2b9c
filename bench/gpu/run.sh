#!/usr/bin/env bash
# On the GPU machine, from the repository root: install bench/gpu/wheels/ offline into a folder of its own (the
# machine's torch and transformers are used), then run bench_gpu.py within 8 minutes. OUT (first argument) gets
# gpu_bench.json; further arguments go to bench_gpu.py (--size tiny: a check in seconds).
set -euo pipefail
out=${1:?usage: bash bench/gpu/run.sh OUT [bench_gpu.py options]}
shift
site=${VISDEP_GPU_SITE:-/tmp/visdep-gpu-site}
python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
  bench/gpu/wheels/*.whl
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1
exec timeout --kill-after=10 450 python3 bench/gpu/bench_gpu.py --out "$out" "$@"
