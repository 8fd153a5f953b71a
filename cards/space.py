"""Write (and optionally run) a small Gradio demo Space for an XPT folder.

    xpt-space runs/xpt-ko-4m --out runs/xpt-ko-4m-space [--repo-id org/xpt-ko-4m]
    xpt-space runs/xpt-ko-4m --out runs/xpt-ko-4m-space --serve --port 7860

The app folder holds `app.py` (text in the model's language in; top-k fill-mask predictions, or class
probabilities for a fine-tuned classifier, out), `requirements.txt` and a `README.md` with the
Space metadata (sdk gradio, app_file, models). Upload the folder as a Gradio Space. The model the
app loads is `--repo-id` (a Hub repo; what a Space needs) or, without it, the folder's absolute
path; the environment variable XPT_MODEL overrides either at run time. An existing `--out` is written
again only when it holds nothing but these files as written here; `--overwrite` replaces other contents,
and the model folder itself (or a folder inside or around it) is never an `--out`.

`--serve` runs the written app.py as a Space would (its own folder as working directory, no
PYTHONPATH, so only the model folder's remote code is used) on 127.0.0.1:PORT until stopped.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
from pathlib import Path

from tokenization.folders import check_output_folder
from training.inputs import looks_like_hub_id

from .card_facts import counted
from .folder import CARD_FILE, FolderInfo, check_not_stock, inspect_folder, load_tokenizer
from .language import language_name, resolve_language
from .licenses import LicenseUnknown, resolve_license
from .widgets import CLASSIFICATION_EXAMPLES, fill_mask_widgets, visible_token

WRITTEN_BY = "written by `xpt-space`"  # in app.py's docstring and the Space README's body
REQUIREMENTS = ["torch>=2.4", "transformers>=5.17,<6", "tokenizers>=0.21", "safetensors>=0.4"]

APP_TEMPLATE = '''"""Gradio demo of the {language} XPT model {model_label} (written by `xpt-space`).

Task: {task}. Set XPT_MODEL to load another repo or a local folder.
"""
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from transformers import pipeline  # noqa: E402

MODEL = os.environ.get("XPT_MODEL", {model_ref!r})
# The model commit this demo was written for (None: the repo's latest); XPT_MODEL loads that model's latest.
REVISION = None if os.environ.get("XPT_MODEL") else {revision!r}
TASK = {task!r}
TRUST_REMOTE_CODE = {trust!r}  # True: the XPT model code lives in the model repo; False: a stock export
DEFAULT_TOP_K = {top_k!r}
LANGUAGE = {language!r}
EXAMPLES = {examples!r}

pipe = pipeline(TASK, model=MODEL, revision=REVISION, trust_remote_code=TRUST_REMOTE_CODE)
MASK = pipe.tokenizer.mask_token


{visible_token_source}


def predict(text, top_k):
    text = (text or "").strip()
    if not text:
        raise gr.Error(f"Type a {{LANGUAGE}} sentence.")
    top_k = int(top_k)
    if TASK == "fill-mask":
        if text.count(MASK) != 1:
            raise gr.Error(f"Put exactly one {{MASK}} where a word is missing.")
        preds = pipe(text, top_k=top_k)
        rows = [[i + 1, visible_token(p["token_str"]), f"{{p['score']:.4f}}", p["sequence"]] for i, p in enumerate(preds)]
        return {{f"{{i + 1}}. {{visible_token(p['token_str'])}}": float(p["score"]) for i, p in enumerate(preds)}}, rows
    preds = sorted(pipe(text, top_k=None), key=lambda p: -p["score"])[:top_k]
    rows = [[i + 1, p["label"], f"{{p['score']:.4f}}"] for i, p in enumerate(preds)]
    return {{p["label"]: float(p["score"]) for p in preds}}, rows


HEADERS = ["rank", "token", "probability", "sentence"] if TASK == "fill-mask" else ["rank", "label", "probability"]
INSTRUCTIONS = (f"Type a {{LANGUAGE}} sentence with **{{MASK}}** where a word is missing; the model ranks the tokens "
                f"that fit." if TASK == "fill-mask"
                else f"Type a {{LANGUAGE}} sentence; the model gives the probability of each class.")

with gr.Blocks(title=f"XPT {{LANGUAGE}} demo") as demo:
    gr.Markdown(f"# {{LANGUAGE}} XPT encoder: {{TASK}}\\n\\nModel: `{{MODEL}}`. {{INSTRUCTIONS}}")
    with gr.Row():
        with gr.Column():
            text = gr.Textbox(label=f"{{LANGUAGE}} text", value=EXAMPLES[0] if EXAMPLES else "", lines=2, elem_id="input-text")
            top_k = gr.Slider(1, 20, value=DEFAULT_TOP_K, step=1, label="top-k", elem_id="top-k")
            button = gr.Button("Predict", variant="primary", elem_id="submit-button")
        with gr.Column():
            label = gr.Label(label="Predictions", elem_id="predictions-label")
            table = gr.Dataframe(headers=HEADERS, label="Ranked predictions", elem_id="predictions-table",
                                 interactive=False)
    if EXAMPLES:
        gr.Examples(EXAMPLES, inputs=text)
    button.click(predict, inputs=[text, top_k], outputs=[label, table])
    text.submit(predict, inputs=[text, top_k], outputs=[label, table])

if __name__ == "__main__":
    demo.launch()
'''


def _gradio_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gradio")
    except PackageNotFoundError:
        return None


def space_readme(*, title: str, model_ref: str, repo_id: str | None, task: str, license: str,
                 sdk_version: str | None, language: str = "ko", trust_remote_code: bool = True) -> str:
    from huggingface_hub import SpaceCard, SpaceCardData

    name = language_name(language)
    data = SpaceCardData(title=title[:60], sdk="gradio", sdk_version=sdk_version, app_file="app.py",
                         license=license, models=[repo_id] if repo_id else None,
                         emoji="🇰🇷" if language == "ko" else "🌐", colorFrom="blue", colorTo="red", pinned=False,
                         short_description=f"{name} XPT encoder: {task} demo"[:60],
                         tags=["xpt", name.lower(), task])
    body = [f"# {title}", "",
            f"Gradio demo of the {name} XPT (cross-lingual post-training) model `{model_ref}`: "
            + ("type a sentence with the mask token, get the top-k tokens that fit." if task == "fill-mask"
               else "type a sentence, get the class probabilities."), "",
            "Written by `xpt-space`. " + ("The model code is loaded from the model repository with "
                                          "`trust_remote_code=True`" if trust_remote_code else
                                          "The model is a stock transformers model: it loads without custom code "
                                          "(`trust_remote_code=False`)")
            + "; the environment variable `XPT_MODEL` selects another model."]
    if not repo_id:
        body += ["", "**Before deploying**: this app points at a local folder; set `XPT_MODEL` (Space variable) "
                 "to the Hub repo of the model, or rewrite the folder with `--repo-id`."]
    return SpaceCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n{{ body }}\n",
                                   body="\n".join(body)).content


def folder_license(model_dir: str | Path) -> str | None:
    """The `license` of the model folder's own card (README.md), if it states one."""
    card = Path(model_dir) / "README.md"
    if not card.is_file():
        return None
    from huggingface_hub import ModelCard

    licence = ModelCard.load(card).data.to_dict().get("license")
    return licence if isinstance(licence, str) and licence != "other" else None


def space_license(info: FolderInfo, explicit: str | None = None) -> str:
    """The Space's licence: `explicit`, else the one the model folder's card states, else (a folder with no
    card yet) the licence `xpt-card` would give its weights. ValueError in one line when there is none."""
    if explicit:
        return explicit
    if (info.path / CARD_FILE).is_file():
        licence = folder_license(info.path)
        if not licence:
            raise ValueError(f"{info.path}: its card states no licence; pass --license ID for the Space")
        return licence
    fix = (f"pass --license ID for the Space, or write the card first with `xpt-card --model-dir {info.path} "
           "--license ID`")
    try:
        return resolve_license(info, required=True, fix=fix)
    except LicenseUnknown as error:
        raise ValueError(f"{info.path} has no card (README.md) to read the licence from; {error}") from None


def card_widget_texts(model_dir: str | Path) -> list[str]:
    """The widget examples of the model folder's card (they are in the model's language)."""
    card = Path(model_dir) / "README.md"
    if not card.is_file():
        return []
    from huggingface_hub import ModelCard

    widgets = ModelCard.load(card).data.to_dict().get("widget") or []
    return [w["text"] for w in widgets if isinstance(w, dict) and isinstance(w.get("text"), str)]


def written_here(path: Path) -> bool:
    """Whether `path` is a file this command writes: app.py or README.md saying so, requirements.txt beside
    such an app.py (a model card, or files added to the Space, are not)."""
    if path.name == "requirements.txt":
        path = path.with_name("app.py")
    if path.name not in ("app.py", "README.md") or not path.is_file():
        return False
    try:
        return WRITTEN_BY in path.read_text(encoding="utf-8").lower()
    except (OSError, UnicodeDecodeError):
        return False


def write_space(model_dir: str | Path, out: str | Path, *, repo_id: str | None = None, top_k: int = 5,
                license: str | None = None, sdk_version: str | None = None, revision: str | None = None,
                overwrite: bool = False) -> Path:
    """`revision`: the model commit the app pins (what `cards.push` printed); `license`: the Space's,
    by default the model card's (`space_license`). `out` may hold only an earlier Space written here, unless
    `overwrite`; it is never the model folder or in or around it (UserError)."""
    info = inspect_folder(model_dir, load_tokenizer=False)
    check_not_stock(info, "xpt-space")
    license = space_license(info, license)
    task = info.pipeline_tag
    if task not in ("fill-mask", "text-classification"):
        raise ValueError(f"the demo supports fill-mask and text-classification models; {model_dir} is {task}")
    spec = ((info.own_results or {}).get("task_spec") or {}) if info.is_fine_tuned else {}
    if len(spec.get("text_columns") or []) == 2 or spec.get("task_type") == "regression":
        texts = counted(len(spec.get("text_columns") or []), "text")
        raise ValueError(f"{model_dir} was fine-tuned on {spec.get('name') or 'a task'} ({spec.get('task_type')}, "
                         f"{texts} in); the demo takes one text and shows class probabilities, so it would "
                         "mislead: its card's usage code shows how to call it")
    tokenizer = load_tokenizer(info.path)
    language = resolve_language(info)
    name = language_name(language)
    # the card's widgets are in the model's language; the built-in examples are Korean
    examples = card_widget_texts(model_dir) or ([] if language != "ko" else (
        [w["text"] for w in fill_mask_widgets(tokenizer)] if task == "fill-mask" else list(CLASSIFICATION_EXAMPLES)))
    if repo_id and not looks_like_hub_id(repo_id):
        raise ValueError(f"repo id {repo_id!r} must look like ORG/NAME")
    model_ref = repo_id or str(info.path.resolve())
    check_output_folder(out, overwrite=overwrite, reads=(model_dir,), flag="--out", ours=written_here)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    app = APP_TEMPLATE.format(model_label=repo_id or info.path.resolve().name, model_ref=model_ref, task=task,
                              language=name,
                              revision=revision if repo_id else None,
                              trust=not info.is_stock, top_k=int(top_k), examples=examples,
                              visible_token_source=inspect.getsource(visible_token).strip())
    compile(app, "app.py", "exec")  # a template error must fail here, not in the Space
    (out / "app.py").write_text(app, encoding="utf-8")
    (out / "requirements.txt").write_text("\n".join(REQUIREMENTS) + "\n", encoding="utf-8")
    title = f"XPT {name} {task}: {(repo_id or info.path.resolve().name).split('/')[-1]}"
    (out / "README.md").write_text(space_readme(title=title, model_ref=model_ref, repo_id=repo_id, task=task,
                                                license=license, sdk_version=sdk_version or _gradio_version(),
                                                language=language, trust_remote_code=not info.is_stock),
                                   encoding="utf-8")
    return out


def serve(app_dir: Path, *, model: str, port: int, host: str = "127.0.0.1") -> None:
    """Replace this process with `python app.py` in `app_dir` (as a Space runs it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME=host, XPT_MODEL=model,
               GRADIO_ANALYTICS_ENABLED="False", TOKENIZERS_PARALLELISM="false")
    os.chdir(app_dir)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "app.py"], env)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="xpt-space", description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", help="saved XPT folder (post-trained or fine-tuned)")
    parser.add_argument("--out", required=True, help="folder to write the Space app into")
    parser.add_argument("--repo-id", help="Hub repo of the model the Space loads (default: the local folder)")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--license", help="licence of the Space (default: the model card's licence; without "
                        "a card, the licence of the model's source when known, as xpt-card finds it)")
    parser.add_argument("--revision", help="model commit the app loads (the id `cards.push` printed; default: latest)")
    parser.add_argument("--sdk-version", help="gradio version for the Space metadata (default: the installed one)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the contents of an --out folder holding other files than a Space written here")
    parser.add_argument("--serve", action="store_true", help="run the app locally after writing it")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    try:
        out = write_space(args.model_dir, args.out, repo_id=args.repo_id, top_k=args.top_k, license=args.license,
                          sdk_version=args.sdk_version, revision=args.revision, overwrite=args.overwrite)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out}/app.py, requirements.txt, README.md")
    if not args.repo_id:
        print(f"note: the app loads {Path(args.model_dir).resolve()}, a folder on this machine: before deploying the "
              "Space, write it again with --repo-id ORG/NAME (or set the Space variable XPT_MODEL to that repo)")
    if args.serve:
        if _gradio_version() is None:
            print("error: --serve needs gradio (`pip install gradio`)", file=sys.stderr)
            return 2
        print(f"serving on http://{args.host}:{args.port} (Ctrl-C to stop)", flush=True)
        serve(out, model=str(Path(args.model_dir).resolve()), port=args.port, host=args.host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
