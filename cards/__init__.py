"""Publishing XPT models: model card (`make_card`), validation and upload (`push`), demo Space (`space`).

    python -m cards.make_card --model-dir DIR
    python -m cards.push --model-dir DIR --repo-id ORG/NAME [--private] [--revision R] [--dry-run] [--format custom|stock]
    python -m cards.space DIR --out APP_DIR [--serve --port P]

Run from the repository root. Post-training (`push_to_hub`) and fine-tuning (`--push-to-hub`) call
`cards.push.push_to_hub(model_dir, repo_id)`.
"""
