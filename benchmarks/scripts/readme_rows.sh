#!/usr/bin/env bash
# The README's "Measured" rows that fit a session, one after another (fp32 unless named; TurboTrainer's defaults:
# the `turbo` peer). Usage: bash benchmarks/scripts/readme_rows.sh OUT_ROOT [ROW ...]; each row's bench.json/md
# lands in OUT_ROOT/ROW. Run on a quiet machine: a disturbed run says so (bench/steadiness.py).
set -euo pipefail
out=${1:?OUT_ROOT}; shift
declare -A ROWS=(
  [mlm]="--peers stock turbo"
  [mlm-variable]="--lengths variable --peers stock turbo"
  [cls-variable]="--task cls --lengths variable --peers stock turbo"
  [sft]="--task sft --vocab-size 151936 --batch-size 8 --seq-len 256 --steps 3 --warmup 1 --rounds 2 --untied --peers stock trl turbo"
  [sft-lora]="--task sft --vocab-size 151936 --batch-size 8 --seq-len 256 --steps 3 --warmup 1 --rounds 2 --untied --lora --peers stock trl turbo"
  [seq2seq]="--task seq2seq --peers stock turbo"
  [clm-bf16]="--task clm --vocab-size 50257 --bf16 --rounds 2 --steps 3 --peers stock turbo"
  [dpo]="--task dpo --vocab-size 151936 --batch-size 4 --peers stock turbo --rounds 2 --steps 2 --warmup 1"
  [dpo-lora]="--task dpo --vocab-size 151936 --batch-size 4 --lora --peers stock turbo --rounds 2 --steps 2 --warmup 1"
  [grpo]="--task grpo --vocab-size 151936 --peers stock turbo --rounds 2 --steps 3 --warmup 1"
  [kto]="--task kto --vocab-size 151936 --peers stock turbo --rounds 2 --steps 2 --warmup 1"
)
ORDER=(mlm mlm-variable cls-variable sft sft-lora seq2seq clm-bf16 dpo dpo-lora kto grpo)
rows=("$@"); [ ${#rows[@]} -gt 0 ] || rows=("${ORDER[@]}")
for row in "${rows[@]}"; do
  echo "=== $row: turbotrain bench ${ROWS[$row]}"
  start=$(date +%s)
  turbotrain bench ${ROWS[$row]} --out "$out/$row" --overwrite > "$out/$row.log" 2>&1 || echo "FAILED: $row (see $out/$row.log)"
  echo "    $(( $(date +%s) - start )) s"
done
