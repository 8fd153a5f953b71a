"""Load a folder the way the Hub (and a user without this project) would, and run its pipeline.

Run by `cards.push --dry-run` as `python -I -c <this file's text> '<json args>'` with a temporary
working directory, no PYTHONPATH and a fresh HF_MODULES_CACHE, so only installed libraries are
visible. The project's own packages are additionally blocked on the import system (an editable
install of `modeling_xpt` would otherwise be importable), and the script checks that
`import modeling_xpt` fails before it loads anything: the model must come from the folder's
remote code alone. The examples are texts, or {"text", "text_pair"} dicts for a sentence-pair
model (the text-classification pipeline takes one as a single input). Prints one line
`LOADCHECK {json}` and exits 0 when everything worked.

This file imports nothing from the project and is not imported by it.
"""
import importlib.abc
import json
import math
import sys

PROJECT_PACKAGES = {"modeling_xpt", "cards", "training", "tokenization", "tests", "benchmarks"}


class _BlockProject(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in PROJECT_PACKAGES:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: a Hub user does not have the project)",
                                      name=name)
        return None


def check(args: dict) -> dict:
    report = {"ok": False, "problems": [], "outputs": []}
    try:
        import modeling_xpt  # noqa: F401
        report["problems"].append("`import modeling_xpt` worked in the isolated process: the check would not prove "
                                  "that the folder's own code is used")
        report["project_importable"] = True
    except ImportError:
        report["project_importable"] = False

    import transformers
    from transformers import AutoConfig, AutoTokenizer, pipeline

    folder, trust = args["model_dir"], bool(args.get("trust_remote_code", True))
    report["transformers"] = transformers.__version__
    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust)
    auto_class = getattr(transformers, args["auto_class"])
    model, info = auto_class.from_pretrained(folder, trust_remote_code=trust, output_loading_info=True)
    model.eval()
    report["config_class"] = type(config).__name__
    report["model_class"] = f"{type(model).__module__}.{type(model).__name__}"
    report["tokenizer_class"] = type(tokenizer).__name__
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        values = [str(v) for v in (info.get(key) or [])]
        if values:
            report["problems"].append(f"{key} when loading the weights: {values[:10]}")
    if args.get("expect_remote_code") and not type(model).__module__.startswith("transformers_modules"):
        report["problems"].append(f"model class {report['model_class']} does not come from the folder's remote code")

    task, top_k = args["task"], int(args.get("top_k", 5))
    pipe = pipeline(task, model=model, tokenizer=tokenizer)
    for text in args["texts"]:
        try:
            if task == "fill-mask":
                out = pipe(text, top_k=top_k)
                preds = out if out and isinstance(out[0], dict) else [p for group in out for p in group]
                scores = [p["score"] for p in preds]
                bad = [s for s in scores if not (isinstance(s, float) and math.isfinite(s) and 0.0 <= s <= 1.0)]
                if not preds or bad or any(a < b - 1e-6 for a, b in zip(scores, scores[1:])):
                    report["problems"].append(f"fill-mask output for {text!r} is not a ranked list of probabilities: {out}")
                report["outputs"].append({"text": text, "predictions": [
                    {"token_str": p["token_str"], "score": p["score"], "token": p["token"]} for p in preds]})
            else:
                out = pipe(text, top_k=None)
                total = sum(p["score"] for p in out)
                if not out or not math.isfinite(total) or (len(out) > 1 and abs(total - 1.0) > 1e-3):
                    report["problems"].append(f"{task} output for {text!r} is not a probability distribution: {out}")
                report["outputs"].append({"text": text, "predictions": out})
        except Exception as error:  # one failing example must not hide the others
            report["problems"].append(f"pipeline failed on {text!r}: {type(error).__name__}: {error}")
    if not args["texts"]:
        report["problems"].append("no widget examples to run")
    report["ok"] = not report["problems"]
    return report


def main() -> int:
    sys.meta_path.insert(0, _BlockProject())
    args = json.loads(sys.argv[1])
    try:
        report = check(args)
    except Exception as error:
        import traceback

        report = {"ok": False, "problems": [f"{type(error).__name__}: {error}"], "traceback": traceback.format_exc()}
    print("LOADCHECK " + json.dumps(report, ensure_ascii=False))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
