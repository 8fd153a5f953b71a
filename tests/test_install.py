"""The project as users install it: a regular (not editable) `pip install` puts the four packages and
the `xpt-*` commands in place, and a command runs from there, outside the repository."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import REPO_ROOT

PACKAGES = ("modeling_xpt", "tokenization", "training", "cards")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`pip install --target` of a copy of the sources (the build writes its build/ folder there)."""
    tmp = tmp_path_factory.mktemp("install")
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    for package in (*PACKAGES, "configs"):
        shutil.copytree(REPO_ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(source)], check=True, capture_output=True, text=True)
    # PYTHONPATH first: the installed copy wins over the editable install of the checkout.
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    return site, env, tmp


def test_every_package_and_command_is_installed(installed):
    site, env, tmp = installed
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert {target.split(".")[0] for target in scripts.values()} == set(PACKAGES) - {"modeling_xpt"}  # the model has none
    for command in scripts:
        assert (site / "bin" / command).is_file(), command
    where = subprocess.run([sys.executable, "-c", "import " + ", ".join(PACKAGES) + "; print("
                            + ", ".join(f"{p}.__file__" for p in PACKAGES) + ")"],
                           cwd=tmp, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert all(path.startswith(str(site)) for path in where), where


def test_an_installed_command_trains_a_tokenizer_outside_the_repository(installed):
    from transformers import AutoTokenizer

    site, env, tmp = installed
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(f"영화가 정말 재미있었다 {i}번째 문장입니다." for i in range(200)), encoding="utf-8")
    done = subprocess.run([str(site / "bin" / "xpt-train-tokenizer"), "--corpus", str(corpus), "--vocab-size", "50",
                           "--family", "bert", "--out", str(tmp / "tok"), "--no-progress"],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    tokenizer = AutoTokenizer.from_pretrained(str(tmp / "tok"))
    assert len(tokenizer) == 50 and tokenizer.mask_token == "[MASK]"
    assert tokenizer.decode(tokenizer("영화가 정말")["input_ids"], skip_special_tokens=True) == "영화가 정말"


def test_an_installed_command_names_a_bad_input_in_one_line(installed):
    site, env, tmp = installed
    done = subprocess.run([str(site / "bin" / "xpt-post-train"), "--config", str(tmp / "missing.yaml")],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "missing.yaml" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_an_installed_copy_reads_the_shipped_configs_by_their_documented_paths(installed):
    """`--config configs/demo.yaml` and the study's presets, outside any checkout: the configs are installed
    with the package."""
    site, env, tmp = installed
    assert (site / "training" / "configs" / "demo.yaml").is_file()
    dry = subprocess.run([str(site / "bin" / "xpt-post-train"), "--config", "configs/demo.yaml", "--dry-run"],
                         cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0 and "configuration valid" in dry.stdout, dry.stderr
    plan = subprocess.run([str(site / "bin" / "xpt-study"), "--preset", "tiny", "--out", str(tmp / "study"),
                           "--dry-run"], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    # the preset is read, and its inputs, relative to a checkout's working directory, are named missing here
    assert plan.returncode == 2 and "corpus: ../shared/data/corpus/" in plan.stderr and "no such file" in plan.stderr, \
        plan.stderr


def test_installed_commands_convert_a_source_and_write_its_card(installed):
    """The installed `xpt-convert` then `xpt-card` (its Jinja template is package data) on a tiny BERT."""
    from tests.model_factories import KOREAN_WORDS, tiny_source, word_tokenizer

    site, env, tmp = installed
    tokenizer = word_tokenizer("bert", KOREAN_WORDS)
    tokenizer.save_pretrained(tmp / "tok")
    tiny_source("bert", tokenizer, out_dir=tmp / "source")
    convert = subprocess.run([str(site / "bin" / "xpt-convert"), "--source", str(tmp / "source"), "--tokenizer",
                              str(tmp / "tok"), "--out", str(tmp / "xpt")], cwd=tmp, env=env, capture_output=True,
                             text=True, timeout=300)
    assert convert.returncode == 0, convert.stderr
    card = subprocess.run([str(site / "bin" / "xpt-card"), "--model-dir", str(tmp / "xpt"), "--license", "mit"],
                          cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert card.returncode == 0, card.stderr
    text = (tmp / "xpt" / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n") and "license: mit" in text and "trust_remote_code=True" in text



@pytest.mark.parametrize("command", sorted(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]))
def test_every_command_names_itself_in_its_usage(command, monkeypatch, capsys):
    """`--help` of each installed command, run in this process through its entry point."""
    import importlib

    module, function = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"][command].split(":")
    monkeypatch.setattr(sys, "argv", [command, "--help"])
    with pytest.raises(SystemExit) as stop:
        getattr(importlib.import_module(module), function)()
    usage = capsys.readouterr().out
    assert stop.value.code == 0 and usage.startswith(f"usage: {command} "), usage[:200]


BAD_INPUTS = {  # command: arguments naming an input that does not exist (outputs under {tmp})
    "xpt-prepare-corpus": "--input {tmp}/missing.txt --out {tmp}/out",
    "xpt-train-tokenizer": "--corpus {tmp}/missing --vocab-size 100 --out {tmp}/out",
    "xpt-tokenizer-report": "--tokenizer {tmp}/missing --corpus {tmp}/missing --out {tmp}/report.json",
    "xpt-convert": "--source {tmp}/missing --tokenizer {tmp}/missing --out {tmp}/out",
    "xpt-export-stock": "{tmp}/missing {tmp}/out",
    "xpt-post-train": "--config {tmp}/missing.yaml",
    "xpt-finetune": "--model {tmp}/missing --task nsmc --data-dir {tmp}/missing --output-dir {tmp}/out",
    "xpt-learning-curve": "{tmp}/missing --task nsmc={tmp}/missing",
    "xpt-study": "--spec {tmp}/missing.yaml --out {tmp}/out",
    "xpt-compare": "{tmp}/missing --out {tmp}/out",
    "xpt-card": "--model-dir {tmp}/missing",
    "xpt-push": "--model-dir {tmp}/missing --repo-id org/x --dry-run",
    "xpt-space": "{tmp}/missing --out {tmp}/out",
}


def test_every_command_is_covered_by_the_bad_input_check():
    assert set(BAD_INPUTS) == set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"])


@pytest.mark.parametrize("command", sorted(BAD_INPUTS))
def test_every_installed_command_names_a_missing_input_in_one_line(command, tmp_path, monkeypatch, capsys):
    """As the console script runs it (`sys.exit(entry_point())`): no traceback, one `error:` line naming the
    missing path, exit 2."""
    import importlib

    module, function = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"][command].split(":")
    monkeypatch.setattr(sys, "argv", [command, *BAD_INPUTS[command].format(tmp=tmp_path).split()])
    try:
        code = getattr(importlib.import_module(module), function)()
    except SystemExit as stop:
        code = stop.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2, (code, lines)
    assert len(lines) == 1 and lines[0].startswith("error: ") and "missing" in lines[0], lines
