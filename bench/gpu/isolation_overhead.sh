#!/usr/bin/env bash
# Isolation overhead of one GPU trial: the same compiled bf16 gpt-355m trial (12 updates) under the exec wrapper with
# --isolation none and --isolation bwrap, interleaved, REPEATS times each; prints wall time, window step time
# (updates 5-12, job clock) and the wrapper's clock for each run, then the medians.
#   bash bench/gpu/isolation_overhead.sh [REPEATS]        (on the device machine, after prepare_carry.sh)
set -uo pipefail
REPEATS=${1:-2}
ROOT=$(pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/*.whl >/dev/null 2>&1 || exit 1
dpkg -x .whl/bubblewrap_*.deb /tmp/bw && export INFRARSI_BWRAP=/tmp/bw/usr/bin/bwrap
export PYTHONUNBUFFERED=1
ARGS="--size gpt-355m --updates 12 --seed 1337 --micro-batch=32 --grad-accum=2 --dtype=bf16 --attention=sdpa
      --compile=1 --activation-checkpointing=0 --optimizer-impl=fused --tf32=1"
for i in $(seq 1 "$REPEATS"); do
    for iso in none bwrap; do
        d=/tmp/iso-$iso-$i
        rm -rf "$d" && mkdir -p "$d/scratch" "$d/out" && cp -r "$ROOT/examples/nanogpt" "$d/src"
        t0=$(date +%s.%N)
        (cd "$d/src" && python3 -I -m infrarsi.verifier.exec --trial-id "$iso-$i" --out "$d/out" --src "$d/src" \
            --scratch "$d/scratch" --isolation "$iso" --quiet -- python3 train.py $ARGS) 2>/dev/null
        t1=$(date +%s.%N)
        python3 - "$d/out/receipt.json" "$iso" "$i" "$t0" "$t1" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1])); w = r["wrapper"]; u = r["updates"]
job = statistics.fmean(x["step_time_s"] for x in u[4:12])
stamps = [x["wall_t"] for x in u]
wrap = (stamps[11] - stamps[3]) / 8
print(f"RUN {sys.argv[2]:5s} {sys.argv[3]} exit={w['exit_code']} updates={len(u)} total_s={float(sys.argv[5]) - float(sys.argv[4]):.2f} "
      f"wrapper_wall_s={w['wall_s']:.2f} window_job_ms={job * 1e3:.1f} window_wrapper_ms={wrap * 1e3:.1f} "
      f"isolation={w['isolation']['mode']}")
PY
    done
done
