#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Tests that need ../shared/data skip,
# with the reason, when it is absent. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
