"""Export an XPT folder (without adapters) as a stock BertForMaskedLM / RobertaForMaskedLM folder.

    python -m modeling_xpt.export_stock runs/xpt-ko runs/xpt-ko-stock

Hosted inference (Hub widgets, Inference Providers, TEI, ONNX export) does not run custom code;
the stock folder has C + 2 layers (ITL_in first, ITL_out last) and gives the same logits, which
this command checks on a sentence made of the tokenizer's own vocabulary before it exits.
"""
from __future__ import annotations

import argparse

import torch
from transformers import AutoTokenizer

from . import XPTForMaskedLM
from ._cli import check_output_folder, run
from .conversion import check_vocabulary, to_stock
from .tokenizer_files import save_model_folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m modeling_xpt.export_stock", description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", help="XPT model folder (post-trained or converted)")
    parser.add_argument("out", help="output folder for the stock model")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest logit difference accepted in the check")
    parser.add_argument("--overwrite", action="store_true", help="replace the contents of an existing output folder")
    args = parser.parse_args(argv)
    check_output_folder(args.out, overwrite=args.overwrite, reads=(args.model_dir,))

    check_vocabulary(args.model_dir)
    model = XPTForMaskedLM.from_pretrained(args.model_dir).eval()
    stock = to_stock(model)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    save_model_folder(stock, tokenizer, args.out)

    ids = torch.arange(min(32, model.config.vocab_size))[None]
    sample = tokenizer(tokenizer.decode(ids[0], skip_special_tokens=True) or "a", return_tensors="pt")
    with torch.no_grad():
        difference = (model(**sample).logits - stock(**sample).logits).abs().max().item()
    if difference > args.tolerance:
        raise ValueError(f"stock export differs from the XPT model by {difference:.2e} (> {args.tolerance})")
    print(f"wrote {args.out}: {type(stock).__name__} with {stock.config.num_hidden_layers} layers; "
          f"max logit difference {difference:.1e}")
    return 0


if __name__ == "__main__":
    run(main)
