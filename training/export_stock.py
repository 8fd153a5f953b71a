"""Export an XPT folder (without adapters) as a stock `*ForMaskedLM` folder of its source family
(BERT, RoBERTa, XLM-RoBERTa or ELECTRA).

    xpt-export-stock runs/xpt-ko runs/xpt-ko-stock

Hosted inference (Hub widgets, Inference Providers, TEI, ONNX export) does not run custom code;
the stock folder has C + 2 layers (ITL_in first, ITL_out last) and gives the same logits, which
this command checks on a sentence made of the tokenizer's own vocabulary before it exits. The run's
records (training_summary.json, results.json) go with it, so that its model card tells the same story.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from modeling_xpt import XPTForMaskedLM, save_model_folder, to_stock
from modeling_xpt.conversion import check_vocabulary
from tokenization.errors import UserError, command
from tokenization.folders import check_output_folder
from training.inputs import not_a_model_folder
from training.run_record import RESULTS_FILE, SUMMARY_FILE


def check_masked_lm(folder: Path) -> None:
    """Only an XPT masked-LM folder has a stock equivalent: a fine-tuned classifier loaded as one would get a
    random LM head (and lose its classifier) while the logit check compared that head with itself."""
    if folder.is_dir() and (wrong := not_a_model_folder(folder)):
        raise UserError(wrong)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{folder}: no readable config.json ({type(error).__name__}); give an XPT model folder") from None
    architectures = config.get("architectures") or ["XPTForMaskedLM"]  # a conversion saved without the field
    if config.get("model_type") != "xpt" or architectures != ["XPTForMaskedLM"]:
        raise UserError(f"{folder} holds {', '.join(architectures)} (model_type {config.get('model_type')!r}); only a "
                        "post-trained or converted XPT masked-LM folder has a stock export (nothing written)")
    if config.get("adapter_size"):
        raise UserError(f"{folder}: this model has bottleneck adapters, which no stock model has (nothing written)")


@command
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="xpt-export-stock", description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="XPT model folder (post-trained or converted)")
    parser.add_argument("out", help="output folder for the stock model")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest logit difference accepted in the check")
    parser.add_argument("--overwrite", action="store_true", help="replace the contents of an existing output folder")
    args = parser.parse_args(argv)
    if not Path(args.model_dir).is_dir():
        raise UserError(f"{args.model_dir}: no such folder (give a post-trained or converted XPT model folder)")
    check_output_folder(args.out, overwrite=args.overwrite, reads=(args.model_dir,))
    check_masked_lm(Path(args.model_dir))

    try:  # a folder that is not an XPT model, or whose tokenizer and embeddings disagree: one line
        check_vocabulary(args.model_dir)
        model = XPTForMaskedLM.from_pretrained(args.model_dir).eval()
    except (ValueError, OSError) as error:
        raise UserError(f"{args.model_dir}: {' '.join(str(error).split())}") from None
    stock = to_stock(model)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    ids = torch.arange(min(32, model.config.vocab_size))[None]
    sample = tokenizer(tokenizer.decode(ids[0], skip_special_tokens=True) or "a", return_tensors="pt")
    with torch.no_grad():
        difference = (model(**sample).logits - stock(**sample).logits).abs().max().item()
    if math.isnan(difference):  # NaN compares as no larger than any tolerance: it is no match
        raise UserError(f"the logits of {args.model_dir} are not finite (NaN: its weights hold NaN or infinity, as "
                        f"after a diverged training run); export a model that trained without diverging (nothing "
                        f"written to {args.out})")
    if difference > args.tolerance:
        raise UserError(f"stock export differs from the XPT model by {difference:.2e} (> {args.tolerance}); "
                        f"nothing written to {args.out}")
    save_model_folder(stock, tokenizer, args.out)
    for name in (SUMMARY_FILE, RESULTS_FILE):
        if (Path(args.model_dir) / name).is_file():
            shutil.copy2(Path(args.model_dir) / name, Path(args.out) / name)
    print(f"wrote {args.out}: {type(stock).__name__} with {stock.config.num_hidden_layers} layers; "
          f"max logit difference {difference:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
