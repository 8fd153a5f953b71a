"""The README's step by step, run as written on a tiny corpus: each command reads what the one
before it wrote, and what a user then sees and loads is true.

The commands are read from README.md (the ```bash block under "## Step by step": the lines running
`xpt-prepare-corpus`, `xpt-train-tokenizer`, `xpt-convert` and `training.post_train`), so an edit there that breaks the chain fails here. Only the input (a
small Korean text file written here), the English source (a tiny random RoBERTa), sizes, steps
and the output root (a temporary folder, the working directory of every command) are replaced;
`configs/xpt-ko-4m.yaml` is used as shipped and must read the folders that steps 1 and 2 write.
"""
from __future__ import annotations

import json
import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import KOREAN_SENTENCES, REPO_ROOT
from tests.model_factories import KOREAN_WORDS, tiny_source, word_tokenizer

README = REPO_ROOT / "README.md"
LENGTH_WARNING = "Token indices sequence length is longer than the specified maximum sequence length"
PROMPT = "Do you wish to run the custom code"


def readme_commands() -> list[list[str]]:
    """Every command of the README's step-by-step block, continuation lines joined, comments dropped."""
    text = README.read_text(encoding="utf-8")
    match = re.search(r"^## Step by step\s*\n+```bash\n(.*?)^```", text, re.S | re.M)
    assert match, "README.md: no ```bash block under '## Step by step'"
    block = match.group(1).replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def step(commands: list[list[str]], marker: str) -> list[str]:
    found = [c for c in commands if marker in c]
    assert len(found) == 1, f"README.md step by step: expected one command with {marker!r}, found {len(found)}"
    return list(found[0])


def flag(cmd: list[str], name: str) -> str:
    assert name in cmd, f"README.md: {' '.join(cmd)!r} has no {name}"
    return cmd[cmd.index(name) + 1]


def replaced(cmd: list[str], **values: str) -> list[str]:
    """`cmd` with the values of the given flags (`valid="5"` -> `--valid 5`) replaced; each flag must be there."""
    cmd = list(cmd)
    for name, value in values.items():
        option = "--" + name.replace("_", "-")
        flag(cmd, option)
        cmd[cmd.index(option) + 1] = value
    return cmd


def runnable(cmd: list[str]) -> list[str]:
    """`.venv/bin/X` -> the X beside this interpreter; repository files (scripts, configs) by absolute path."""
    out = []
    for arg in cmd:
        if arg == ".venv/bin/python":
            out.append(sys.executable)
        elif arg.startswith(".venv/bin/"):
            tool = Path(sys.executable).parent / arg[len(".venv/bin/"):]
            assert tool.is_file(), f"README.md runs {arg}, which is not installed beside {sys.executable}"
            out.append(str(tool))
        elif not arg.startswith("-") and "/" in arg and (REPO_ROOT / arg).is_file():
            out.append(str(REPO_ROOT / arg))
        else:
            out.append(arg)
    return out


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(runnable(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{' '.join(cmd)}\nexit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def korean_text(path: Path) -> None:
    rnd = random.Random(0)
    words = [w for s in KOREAN_SENTENCES for w in s.split()]
    lines = [" ".join(rnd.choice(words) for _ in range(rnd.randint(4, 10))) for _ in range(500)]
    lines += [f"{i}번째 문장은 테스트를 위한 한국어 문장이다." for i in range(100)]
    # one sentence far longer than the model's positions: packing cuts it into rows
    lines.append(" ".join(rnd.choice(words) for _ in range(150)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme")
    commands = readme_commands()
    prepare = step(commands, ".venv/bin/xpt-prepare-corpus")
    train_tok = step(commands, ".venv/bin/xpt-train-tokenizer")
    convert = step(commands, ".venv/bin/xpt-convert")
    post = next((c for c in commands if "training.post_train" in c), None)
    assert post, "README.md step by step: no training.post_train command"

    text = root / "ko.txt"
    korean_text(text)
    source = root / "tiny-roberta"
    tiny_source(flag(train_tok, "--family"), word_tokenizer(flag(train_tok, "--family"), KOREAN_WORDS), source)

    out = {"root": root, "prepare": prepare, "train_tok": train_tok, "convert": convert, "post": post,
           "config": yaml.safe_load((REPO_ROOT / flag(post, "--config")).read_text(encoding="utf-8"))}
    run(replaced(prepare, input=str(text), valid="20", test="20") + ["--no-progress"], root)
    run(replaced(train_tok, vocab_size="150"), root)
    run(replaced(convert, source=str(source)), root)
    out["post_proc"] = run(post + [
        "--source", str(source), "--max-seq-length", "32", "--train-steps", "4", "--phase1-steps", "2",
        "--warmup-steps", "1", "--global-batch-size", "8", "--per-device-batch-size", "8", "--eval-steps", "2",
        "--save-steps", "100", "--max-eval-sentences", "20", "--mixed-precision", "no", "--num-workers", "0",
        "--report-to", "none"], root)
    out["model_dir"] = root / flag(post, "--output-dir")
    return out


def test_each_step_reads_what_the_one_before_wrote(chain):
    corpus, tok = flag(chain["prepare"], "--out"), flag(chain["train_tok"], "--out")
    assert flag(chain["train_tok"], "--corpus") == corpus
    assert flag(chain["convert"], "--tokenizer") == tok
    assert chain["config"]["data"] == corpus and chain["config"]["tokenizer"] == tok
    root = chain["root"]
    assert (root / corpus / "stats.json").is_file() and (root / tok / "tokenizer.json").is_file()
    assert (root / flag(chain["convert"], "--out") / "config.json").is_file()
    summary = json.loads((chain["model_dir"] / "training_summary.json").read_text(encoding="utf-8"))
    # recorded absolute, so that a card made from another folder never reads `runs/kowiki` as a Hub dataset id
    assert summary["tokenizer"] == str((root / tok).resolve()) and summary["total_steps"] == 4
    assert summary["data"]["spec"] == str((root / corpus).resolve())
    # the run read this folder's corpus, not one of the same name elsewhere (e.g. the repository's runs/);
    # sentences are counted as sentences, and the one longer than a row as several pieces
    prepared = json.loads((root / corpus / "stats.json").read_text())["splits"]["train"]["sentences"]
    assert summary["data"]["train_sentences"] == prepared < summary["data"]["train_pieces"] < 2 * prepared


def test_no_false_length_warning_and_tokenizer_knows_the_models_positions(chain):
    """Data preparation tokenises whole sentences before cutting them into rows: no 'indexing errors' warning.
    The saved tokenizer's limit is the model's usable positions, not the run's sequence length."""
    proc = chain["post_proc"]
    assert LENGTH_WARNING not in proc.stdout + proc.stderr
    folder = chain["model_dir"]
    config = json.loads((folder / "config.json").read_text())
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok_config["model_max_length"] == config["max_position_embeddings"] - config["position_offset"] == 64
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "is_local" not in tok_config


LOAD = """
import json, sys
from transformers import AutoTokenizer, PreTrainedTokenizerFast
folder, tok_dir = sys.argv[1], sys.argv[2]
text = "대한민국의 수도는 서울이다. 오늘은 날씨가 맑고 따뜻하다."
loads = {"trained": AutoTokenizer.from_pretrained(tok_dir),
         "folder, PreTrainedTokenizerFast": PreTrainedTokenizerFast.from_pretrained(folder),
         "folder, AutoTokenizer": AutoTokenizer.from_pretrained(folder, trust_remote_code=True)}
print(json.dumps({k: t(text, "도서관에서 책을 빌려 읽었다.")["input_ids"] for k, t in loads.items()}))
"""


def test_saved_tokenizer_loads_without_a_prompt_and_gives_the_same_ids(chain):
    """Fresh process, stdin closed: the tokenizer loads without asking about custom code, and every way of
    loading it (the trained folder, the model folder) gives the same ids."""
    root = chain["root"]
    proc = run([".venv/bin/python", "-c", LOAD, str(chain["model_dir"]), flag(chain["train_tok"], "--out")], root)
    assert PROMPT not in proc.stdout + proc.stderr
    ids = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len({json.dumps(v) for v in ids.values()}) == 1, ids
    assert 3 not in ids["trained"] and len(ids["trained"]) > 8  # <unk> is 3: words of the corpus are not unknown


def test_the_language_flows_from_the_corpus_to_every_config(chain):
    """prepare_corpus records the language (ko by default) in stats.json; the tokenizer training, the
    conversion and the post-training carry it on, and the card reads it."""
    root = chain["root"]
    recorded = {
        "corpus stats.json": json.loads((root / flag(chain["prepare"], "--out") / "stats.json").read_text())["language"],
        "tokenizer training_info.json": json.loads(
            (root / flag(chain["train_tok"], "--out") / "training_info.json").read_text())["language"],
        "converted config.json": json.loads(
            (root / flag(chain["convert"], "--out") / "config.json").read_text())["language"],
        "post-trained config.json": json.loads((chain["model_dir"] / "config.json").read_text())["language"],
    }
    assert set(recorded.values()) == {"ko"}, recorded
