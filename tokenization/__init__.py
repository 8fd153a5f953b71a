"""Korean corpus preparation, tokenizer training and tokenizer report.

Run from the repository root:

    python -m tokenization.prepare_corpus --input PATH [--input PATH ...] --out DIR [--valid N] [--test N]
    python -m tokenization.train_tokenizer --corpus DIR_OR_FILE --vocab-size N --family roberta|bert --out DIR
    python -m tokenization.report --tokenizer DIR --corpus DIR_OR_FILE [--source-tokenizer PATH_OR_ID]

Python API used by other modules and tests:

    from tokenization.train_tokenizer import train_tokenizer
"""
