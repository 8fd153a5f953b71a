#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Extra arguments go to pytest.
# Tests that need ../shared/data skip, with the reason, when it is absent.
# The Space's browser test needs Debian's chromium: run as root with apt-get available, this
# installs it (the one system package the project uses); elsewhere that test skips with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "note: chromium could not be installed; the Space browser test will skip"
fi
exec .venv/bin/python -m pytest "$@"
