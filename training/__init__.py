"""Post-training, MLM data/masking/metrics, fine-tuning and comparison scripts (run from the repo root)."""
