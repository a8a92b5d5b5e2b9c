#!/usr/bin/env bash
# Where PyPI is reachable: the wheels of bench/gpu/wheelhouse.txt for the GPU machine (CPython 3.12, x86-64 Linux)
# into bench/gpu/wheels/, which bench/gpu/run.sh installs there offline. About 5 MB.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$here/wheels"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$here/wheels" -r "$here/wheelhouse.txt"
du -sh "$here/wheels"
