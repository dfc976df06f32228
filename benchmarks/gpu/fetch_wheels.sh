#!/usr/bin/env bash
# Wheels for a GPU machine that cannot reach the package registries (run here, where pip can):
# the packages run.sh needs that a CUDA image with torch and transformers often lacks, at the
# versions installed on this machine (the ones the tests ran with), for CPython $PYVER on x86-64.
#
#   bash benchmarks/gpu/fetch_wheels.sh [DIR]        # default DIR: .whl (git-ignored)
#   then on the GPU machine: bash benchmarks/gpu/run.sh --wheels DIR
#
# run.sh installs a wheel only where its package is missing or older (with --no-deps).
set -eu
dir="${1:-.whl}"
pyver="${PYVER:-3.12}"
pkgs="${GPUCHECK_WHEEL_PKGS:-datasets dill multiprocess pyarrow paramiko bcrypt pynacl cryptography cffi pycparser invoke}"
specs=""
for p in $pkgs; do
  v="$(python3 -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$p")"
  specs="$specs $p==$v"
done
mkdir -p "$dir"
plats=""
for n in 2_17 2_24 2_27 2_28 2_31 2_34; do plats="$plats --platform manylinux_${n}_x86_64"; done
# shellcheck disable=SC2086  # the lists are meant to split
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
  $plats --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir" $specs
du -sh "$dir"
ls "$dir"
