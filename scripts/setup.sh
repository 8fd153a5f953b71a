#!/usr/bin/env bash
# Create .venv (if needed) and install the project with what the demo and the tests import.
# Python packages only, nothing system-wide. Idempotent: a second run only checks.
# Needs python3 >= 3.10 and pip access to PyPI. First run: about 3 minutes (torch is the bulk);
# later runs return at once while pyproject.toml, this script and the checkout's place are unchanged
# (a stamp in .venv records them; delete .venv/.xpt-setup to check the packages again).
#   XPT_TORCH_SPEC  torch requirement to install when torch is missing (default: torch==2.13.0,
#                   a CPU build; on a GPU machine install your CUDA build of torch into .venv
#                   first and it is kept).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAMP=.venv/.xpt-setup
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1) $PWD"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] \
    && [ -x .venv/bin/xpt-post-train ] \
    && .venv/bin/python -I -c "import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ['torch', \
       'transformers', 'konlpy', 'modeling_xpt', 'training', 'tokenization', 'cards'])))" 2>/dev/null; then
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  # Pinned: an unpinned torch pulls a multi-GB CUDA build where a CPU build is wanted.
  .venv/bin/python -m pip install -q "${XPT_TORCH_SPEC:-torch==2.13.0}"
fi
.venv/bin/python -m pip install -q -e ".[offline-source,dev,space,sentence-transformers]"
# konlpy's bundled Korean text is the demo's fallback corpus; only its files are read, so its Java
# bridge (JPype) is not needed.
.venv/bin/python -m pip install -q --no-deps "konlpy>=0.6"
echo "$WANT" > "$STAMP"
