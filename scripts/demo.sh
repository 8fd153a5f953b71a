#!/usr/bin/env bash
# The main job, end to end and offline, on the embedded default (configs/demo.yaml):
#   train a Korean tokenizer -> convert the offline English MiniLM into XPT -> two-phase
#   post-training -> valid/test metrics -> Hub-ready folder (weights, tokenizer, remote code,
#   training_summary.json) -> model card -> load it in a fresh process that cannot import this
#   project (as the Hub does) and run fill-mask on the card's widget examples -> a linear probe on NSMC
#   beside the no-model floor (when ../shared/data/tasks/nsmc is there).
# Data: ../shared/data/corpus when present, else the Korean text bundled in konlpy.
# Extra arguments go to post_train.py (e.g. --max-steps 40).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${XPT_DEMO_DIR:-runs/demo}
.venv/bin/python training/post_train.py --config configs/demo.yaml --output-dir "$OUT" --overwrite-output-dir true "$@"
.venv/bin/python -m cards.make_card --model-dir "$OUT"
.venv/bin/python -m cards.push --model-dir "$OUT" --repo-id local/xpt-demo --dry-run
# What the model is worth on a real task: a linear probe of the frozen encoder on NSMC (2,000 labelled
# reviews, scored on its 5,000 dev reviews) beside the no-model floor on the same splits.
NSMC=${XPT_NSMC_DIR:-../shared/data/tasks/nsmc}
if [ -d "$NSMC" ]; then
  .venv/bin/python training/finetune.py --model "$OUT" --task nsmc --data-dir "$NSMC" --mode probe --floor \
      --max-train-samples 2000 --max-length 64 --output-dir "$OUT-nsmc-probe" --overwrite-output-dir --no-progress \
      | grep -v "^wrote "
else
  echo "note: $NSMC not found: the NSMC probe and its no-model floor are skipped (set XPT_NSMC_DIR)"
fi
echo "Done: $OUT holds the post-trained XPT model; see $OUT/README.md and $OUT/training_summary.json"
