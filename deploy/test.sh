#!/usr/bin/env bash
# The README's test command: install everything, start what is not running, run the whole test suite.
#   bash deploy/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e '.[dev,train]' 2>&1 | grep -v -i "warning" || true
python3 -c "import infrarsi.controller, infrarsi.verifier, infrarsi.surrogate, torch" || { echo "test.sh: install failed" >&2; exit 1; }
bash deploy/bubblewrap.sh  # the exec wrapper's sandbox (trials fail closed without it)
bash deploy/slurm-up.sh
bash deploy/pg-up.sh
export OPENBLAS_NUM_THREADS=1
# The suite runs with an empty HOME, as a new user's would be: no test may depend on ~/.gitconfig or other dotfiles
# (pip keeps the real cache so the wheel test need not download everything again).
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$HOME/.cache/pip}"
HOME="$(mktemp -d -t infrarsi-test-home.XXXXXX)"
export HOME
exec python3 -m pytest -q -p no:cacheprovider "$@"
