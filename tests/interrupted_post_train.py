"""Post-training as `training/post_train.py` runs it, killed right after optimiser step STEP: the process
ends at once with exit status 17 (no summary, no final save, nothing cleaned up), as if the machine had
died there. The resume tests run it in a subprocess, then resume the folder with the real command.

    python tests/interrupted_post_train.py STEP [post_train.py arguments ...]
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training import post_train  # noqa: E402
from training.config import load_config  # noqa: E402

KILLED = 17


def main() -> None:
    stop = int(sys.argv[1])

    def die_after_stop_step(state: post_train.RunState) -> None:
        if state.step >= stop:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(KILLED)

    post_train.train(load_config(sys.argv[2:]), on_step_end=die_after_stop_step)


if __name__ == "__main__":
    main()
