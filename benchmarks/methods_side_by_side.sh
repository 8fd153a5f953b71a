#!/usr/bin/env bash
# Post-training methods side by side on one GPU, then each fine-tuned on NSMC and KorSTS.
#
#   bash benchmarks/methods_side_by_side.sh OUT_DIR [STEPS [PHASE1_STEPS [WARMUP]]]
#
# Every run is `configs/shared-minilm.yaml` (same seed, so the same batches and masks) with
# STEPS steps (default 1500), phase 1 = PHASE1_STEPS (500), warmup WARMUP (150); then, per run,
# the README's NSMC and KorSTS fine-tuning recipes with 3 seeds and the mean-pooled probes (the
# no-model floor once, with the first run). RUNS lists the runs (default "xpt xpt-sp scratch
# adapters"): a method, or METHOD/PHASE1_STEPS/PHASE1_LR for the phase-1 sweep (`xpt/250/1e-3`).
# The runs start together: on one GPU their set-up (tokenising, compiling) overlaps and the
# fine-tuning processes, each far from filling the GPU, share it. xpt-study runs the same
# recipe one run after another; this script exists for the time that saves on a rented GPU.
#
# Inputs: the folder of recipe (c) in benchmarks/README.md (SOURCE, TOKENIZER, DATA, TASKS below).
# Results: OUT_DIR/pt-NAME (model, training_summary.json), OUT_DIR/ft-NAME-TASK/results.json,
# a log per step; `xpt-compare OUT_DIR --out REPORT` tabulates them.
set -u
R=${1:?usage: methods_side_by_side.sh OUT_DIR [STEPS [PHASE1_STEPS [WARMUP]]]}
STEPS=${2:-1500}; P1=${3:-500}; WU=${4:-150}
RUNS=${RUNS:-"xpt xpt-sp scratch adapters"}
SOURCE=${SOURCE:-.device/minilm-fp16}; TOKENIZER=${TOKENIZER:-.device/tok-ko-32k}
DATA=${DATA:-.device/corpus}; TASKS=${TASKS:-.device/tasks}
PY=${PY:-python3}
mkdir -p "$R"

finetune() {  # finetune NAME TASK [--floor]
  local name=$1 task=$2 recipe
  if [ "$task" = nsmc ]; then
    recipe="--hold-out-test 5000 --max-train-samples 2000 --epochs 4 --learning-rate 1e-4 --pooling mean"
  else
    recipe="--pair-encoding bi --sts-loss cosent --epochs 5 --learning-rate 5e-5"
  fi
  OMP_NUM_THREADS=2 $PY training/finetune.py --model "$R/pt-$name" --task "$task" --data-dir "$TASKS/$task" \
    $recipe --batch-size 32 --max-length 64 --mode both ${3:-} --seeds 3 --save-model none --no-progress \
    --output-dir "$R/ft-$name-$task" ${FT_EXTRA:-} > "$R/ft-$name-$task.log" 2>&1
  local rc=$?
  echo "$(date +%T) fine-tuned $name on $task: exit $rc"
  return $rc
}

one_run() {  # one_run RUN [--floor]
  local method p1 p1_arg lr1 name
  IFS=/ read -r method p1_arg lr1 <<< "$1"
  p1=${p1_arg:-$P1}
  name=$method${p1_arg:+-p1-$p1}${lr1:+-lr1-$lr1}
  OMP_NUM_THREADS=2 $PY training/post_train.py --config configs/shared-minilm.yaml --method "$method" \
    --source "$SOURCE" --tokenizer "$TOKENIZER" --data "$DATA" \
    --train-steps "$STEPS" --phase1-steps "$p1" ${lr1:+--phase1-learning-rate "$lr1"} --warmup-steps "$WU" \
    --eval-steps "$p1" --save-steps 100000 --num-workers "${NUM_WORKERS:-3}" --cache-dir "/tmp/xpt-cache-$name" \
    --output-dir "$R/pt-$name" ${PT_EXTRA:-} > "$R/pt-$name.log" 2>&1
  local rc=$?
  echo "$(date +%T) post-trained $name: exit $rc"
  [ $rc = 0 ] || return $rc
  finetune "$name" nsmc ${2:-} & local nsmc=$!
  finetune "$name" korsts ${2:-} & local korsts=$!
  wait $nsmc; local a=$?
  wait $korsts; local b=$?
  return $((a || b))
}

echo "$(date +%T) start: $RUNS, $STEPS steps (phase 1: $P1)"
floor=--floor; pids=""
for run in $RUNS; do one_run "$run" $floor & pids="$pids $!"; floor=""; done
failed=0
for pid in $pids; do wait "$pid" || failed=1; done
echo "$(date +%T) done$([ $failed = 0 ] || echo ': some runs failed, see their logs')"
exit $failed
