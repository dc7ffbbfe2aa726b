#!/usr/bin/env bash
# The default `turbotrain pretrain` (10-minute budget), idle and then beside one CPU-bound process, each from an
# empty cache (corpus, tokenizer and auto's backend measurement redone, as on a fresh clone).
# Usage: benchmarks/scripts/pretrain_budget.sh OUT_DIR [extra pretrain flags]   (on an otherwise idle machine)
set -euo pipefail
out=${1:?OUT_DIR}
shift
python=${PYTHON:-python}
mkdir -p "$out"
run() {  # NAME [flags]: one whole command, timed from outside
    local name=$1 start end
    shift
    start=$(date +%s.%N)
    TURBOTRAIN_CACHE="$out/cache-$name" "$python" -m turbotrain.cli pretrain --output-dir "$out/$name" "$@" \
        > "$out/$name.log" 2>&1
    end=$(date +%s.%N)
    echo "$name: $(echo "$end - $start" | bc) s wall" | tee -a "$out/walls.txt"
}
run idle "$@"
"$python" -c 'while True: pass' &
spinner=$!
trap 'kill $spinner' EXIT
sleep 5
run busy "$@"
