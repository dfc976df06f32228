#!/usr/bin/env bash
# The one-shot GPU check (issue 18). Needs only this repository, a Python 3.9+ with pip, and
# either the package registries or a folder of wheels (--wheels DIR / GPUCHECK_WHEELS).
#
#   OUT=/tmp/gpucheck bash benchmarks/gpu/run.sh             # on one NVIDIA GPU: about 5-7 minutes
#   OUT=/tmp/gpucheck bash benchmarks/gpu/run.sh --cpu-dry-run   # any CPU machine: under a minute
#
# Writes $OUT/gpu-check.json (every figure, every step's outcome; rewritten after each step),
# summary.md, gpu.jsonl, doctor.json, oom-output.log and idle-output.log, prints the summary,
# and exits 1 if any step failed. PYTHON picks the interpreter (default: python3).
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${PYTHON:-python3}"
if ! command -v "$py" >/dev/null 2>&1; then
  echo "gpu check: no $py on PATH; set PYTHON=/path/to/python3" >&2
  exit 2
fi
export PYTHONUNBUFFERED=1 PIP_NO_INPUT=1
cd "$repo" || exit 2
# The overall guard: 8 minutes (10 for a dry run). check.py clips its step guards to finish
# inside it with the results written; timeout's SIGTERM (then SIGKILL 20 s later) is the backstop.
total="${GPUCHECK_TIMEOUT:-480}"
case " $* " in
  # a dry run's models are tiny: one thread a process does the same work on a third less CPU
  # (torch's threads mostly wait on each other), and much faster on a shared machine
  *" --cpu-dry-run "*) total="${GPUCHECK_TIMEOUT:-600}"; export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" ;;
esac
if ! command -v timeout >/dev/null 2>&1; then  # no coreutils timeout: the step guards alone
  exec "$py" "$here/check.py" --total-budget "$total" "$@" </dev/null
fi
exec timeout --kill-after=20 "$((total + 15))" "$py" "$here/check.py" --total-budget "$total" "$@" </dev/null
