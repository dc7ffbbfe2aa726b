#!/usr/bin/env bash
# The small classification bench beside two CPU-bound processes (issue 46, "steady on a busy machine").
# Usage: bash benchmarks/scripts/busy_machine.sh OUT_ROOT [extra bench flags...]
# Runs, one after another, each beside two fresh busy loops (python `while True: pass`, killed after the run):
#   threads-2:  OMP_NUM_THREADS=2 (the user's setting stands: TurboTrainer keeps 2 threads, as before 2026-12-05)
#   passive:    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive (threads sleep at barriers instead of spinning)
#   default:    no thread setting (TurboTrainer takes one thread fewer per busy core, hidden_callbacks.py)
#   quiet:      no thread setting, no busy loops
# Each run: turbotrain bench --task cls --lengths variable --peers stock turbo --rounds 4 --steps 3.
set -euo pipefail
out=${1:?OUT_ROOT}; shift
bench() { .venv/bin/turbotrain bench --task cls --lengths variable --peers stock turbo --rounds 4 --steps 3 \
    --overwrite "$@"; }
hogs() { for _ in 1 2; do timeout 900 python3 -c "while True: pass" & done; sleep 2; }
unhog() { pkill -f "while True: pass" || true; sleep 2; }
hogs; env OMP_NUM_THREADS=2 bash -c "$(declare -f bench); bench --out $out/threads-2 $*"; unhog
hogs; env OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive bash -c "$(declare -f bench); bench --out $out/passive $*"; unhog
hogs; env -u OMP_NUM_THREADS bash -c "$(declare -f bench); bench --out $out/default $*"; unhog
env -u OMP_NUM_THREADS bash -c "$(declare -f bench); bench --out $out/quiet $*"
