#!/usr/bin/env bash
# Copy this checkout's code into DIR so that a benchmark variant runs on a frozen tree:
#   bash bench/snapshot.sh /tmp/snapA && cd /tmp/snapA && PYTHONPATH=$PWD python bench/sweep.py run ...
# The package folders land under DIR/infrarsi/ (the import namespace) and bench/ under DIR/; edit DIR's copy
# (e.g. a DEFAULT_TUNING key) to measure a variant. PYTHONPATH wins over the editable install, so a sweep is not
# moved by later edits here or by a fresh-clone CI that re-points the editable install at its clone.
set -euo pipefail
dest="${1:?usage: bench/snapshot.sh DIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$dest"
mkdir -p "$dest/infrarsi"
# the package folders, as pyproject.toml maps them onto the infrarsi namespace (one list, not a copy of it)
folders=$(python3 -c 'import sys, tomllib; m = tomllib.load(open(sys.argv[1], "rb"))["tool"]["setuptools"]["package-dir"]
print(" ".join(sorted(set(m.values()))))' "$root/pyproject.toml")
for p in $folders; do cp -r "$root/$p" "$dest/infrarsi/$p"; done
cp -r "$root/bench" "$dest/bench"
find "$dest" -name __pycache__ -prune -exec rm -rf {} +
echo "snapshot of $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo '+changes') in $dest"
