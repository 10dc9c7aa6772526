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
for p in controller verifier surrogate migrations sbatch_templates; do cp -r "$root/$p" "$dest/infrarsi/$p"; done
cp -r "$root/bench" "$dest/bench"
find "$dest" -name __pycache__ -prune -exec rm -rf {} +
echo "snapshot of $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo '+changes') in $dest"
