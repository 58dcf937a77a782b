#!/bin/sh
# A lent GPU machine's session in one call. Such a machine is lent for minutes (start included),
# reaches no package index, and has torch, pytest and NVML but not autotune's other
# dependencies, so everything is prepared before the call and runs in one command.
#
# Before the call, on the machine with the checkout (wheels for the device image's Python 3.12):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl optuna==5.0.0 SQLAlchemy==2.1.9 alembic==1.20.1 \
#     Mako==1.4.3 colorlog==6.12.0 pydantic==2.14.4 pydantic_core==2.50.5 \
#     annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0 \
#     pydantic-settings==2.16.3 python-dotenv==1.2.4 fastapi==0.165.0 starlette==1.10.0 \
#     uvicorn==0.54.0 plotly==7.1.0 typer==0.29.2 narwhals==2.29.0
# The call: `sh benchmarks/gpu_session.sh` in the checkout, carrying .whl, with $OUT set.
#
# What it does, in order of value: each built-in with default options (`autotune run
# builtin:NAME`, the device `cuda`), each cut at JOB_SECONDS and all within SESSION_SECONDS,
# and what its profile predicted against what each trial measured (python -m
# benchmarks.predictions); then the CUDA tests with the time left. Its own stdout is the summary;
# everything else (the jobs' databases, recommendations and logs) lands in $OUT.
#
# Elsewhere it runs as is, minus the wheels: DEVICE=cpu WORKLOADS=text-transformer sh ...
set -u
OUT=${OUT:-/tmp/gpu-session}
DEVICE=${DEVICE:-cuda}
WORKLOADS=${WORKLOADS:-text-transformer image-cnn slow-storage}
JOB_SECONDS=${JOB_SECONDS:-200}
SESSION_SECONDS=${SESSION_SECONDS:-560}
started=$(date +%s)
mkdir -p "$OUT"

left() { echo $((SESSION_SECONDS - ($(date +%s) - started))); }

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl > "$OUT/pip.txt" 2>&1 || { cat "$OUT/pip.txt"; exit 1; }
  PYTHONPATH=/tmp/site:$PWD
else
  PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  nproc; } > "$OUT/machine.txt" 2>&1
echo "== machine"; cat "$OUT/machine.txt"

for name in $WORKLOADS; do
  seconds=$(left)
  [ "$seconds" -gt "$JOB_SECONDS" ] && seconds=$JOB_SECONDS
  if [ "$seconds" -lt 30 ]; then echo "== $name: not run, $seconds s left"; continue; fi
  job_started=$(date +%s)
  timeout "$seconds" python3 -m autotune run "builtin:$name" --device "$DEVICE" --seed 0 \
    --db "sqlite:///$OUT/$name.db" --out "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  code=$?
  echo "== $name: exit $code after $(($(date +%s) - job_started)) s (limit $seconds s;" \
    "124: cut there)"
  grep -A 2 "^trials:" "$OUT/$name.log"
  python3 -m benchmarks.predictions "sqlite:///$OUT/$name.db" > "$OUT/$name-predictions.txt" 2>&1
  grep "^job " "$OUT/$name-predictions.txt"
done

seconds=$(left)
if [ "$seconds" -ge 60 ]; then
  timeout "$seconds" python3 -m pytest -m cuda -p no:cacheprovider -q -rs \
    tests/test_apply.py tests/test_compile.py tests/test_cuda.py tests/test_launcher.py \
    tests/test_measure.py tests/test_profile.py > "$OUT/pytest-cuda.txt" 2>&1
  echo "== pytest -m cuda: exit $? ($seconds s allowed)"; tail -n 3 "$OUT/pytest-cuda.txt"
else
  echo "== pytest -m cuda: not run, $seconds s left"
fi
echo "== $(($(date +%s) - started)) s in all"
