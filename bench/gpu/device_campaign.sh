#!/usr/bin/env bash
# Run (or resume) the nanogpt-355m campaign on a lent H200 with the LocalExecutor and SQLite, for at most
# DRAIN seconds of launching, then copy the state (database, signing key) and the report to $OUT.
#   [BUDGET_GPU_HOURS=x] bash bench/gpu/device_campaign.sh DRAIN_SECONDS [handtune-configs]
# State travels between machine calls in .gpu-state/ (carried; ignored by git).  The example is copied to
# /tmp/nano and committed with fixed author/dates so its commit id (locked by init) is the same on every machine.
set -uo pipefail
DRAIN=${1:-420}
HAND=${2:-}
ROOT=$(pwd)
# .whl/ holds the runtime wheels the image lacks plus infrarsi's own wheel (bench/gpu/prepare_carry.sh builds it);
# they go into the image's interpreter itself, so the sandboxed trials (which see that interpreter read-only and no
# PYTHONPATH) import the same infrarsi.  bubblewrap comes as Debian's .deb, unpacked under /tmp/bw.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/*.whl || exit 1
if ls .whl/bubblewrap_*.deb >/dev/null 2>&1; then
    dpkg -x .whl/bubblewrap_*.deb /tmp/bw && export INFRARSI_BWRAP=/tmp/bw/usr/bin/bwrap
fi
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
export INFRARSI_HOME=$ROOT/.gpu-state INFRARSI_SCRATCH=/tmp/infrarsi-scratch INFRARSI_GPU_CLASS=h200
mkdir -p "$INFRARSI_HOME"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
rm -rf /tmp/nano && cp -r examples/nanogpt /tmp/nano && rm -rf /tmp/nano/__pycache__
# BUDGET_GPU_HOURS=x: the same campaign under a tighter GPU-hour budget (issue 15 item 4: the budget must hold with
# trials in flight and the promotion reserved); trials=20 so that the GPU-hours, not the trial count, stop it
if [ -n "${BUDGET_GPU_HOURS:-}" ]; then
    sed -i -e "s/^  gpu_hours: .*/  gpu_hours: $BUDGET_GPU_HOURS/" -e "s/^  trials: .*/  trials: 20/" \
        /tmp/nano/infrarsi.gpu-short.yaml
    grep -A2 '^budget:' /tmp/nano/infrarsi.gpu-short.yaml
fi
export GIT_AUTHOR_DATE="2026-11-29T00:00:00Z" GIT_COMMITTER_DATE="2026-11-29T00:00:00Z"
(cd /tmp/nano && git init -q && git add -A && git -c user.name=infrarsi -c user.email=i@i commit -qm nanogpt && git rev-parse HEAD)
cd /tmp/nano
python3 -m infrarsi.controller.cli.main run infrarsi.gpu-short.yaml --drain-after "$DRAIN" 2>&1 | tee "$OUT/campaign.log"
cd "$ROOT"
if [ -n "$HAND" ]; then
    python3 bench/gpu/handtune.py --configs "$HAND" --json "$OUT/handtune.json" 2>&1 | tail -20
fi
# the store runs SQLite in WAL mode: copy through the backup API (a plain cp of the main file loses the WAL's rows)
python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
    "$INFRARSI_HOME/infrarsi.sqlite" "$OUT/infrarsi.sqlite"
cp "$INFRARSI_HOME/signing.key" "$OUT/" 2>/dev/null
rep=$(ls -d /tmp/infrarsi-scratch/*/report 2>/dev/null | head -1)
[ -n "$rep" ] && cp "$rep/REPORT.md" "$rep/result.json" "$rep/progress.png" "$OUT/" 2>/dev/null
ls -la "$OUT"
