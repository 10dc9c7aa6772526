#!/bin/sh
# Stop the single-node Slurm started by deploy/slurm-up.sh (slurmd, slurmctld,
# munged), by the PIDs in their pid files.  Packages and configuration stay;
# `deploy/slurm-up.sh` brings the cluster back.  Needs root.
set -eu
[ "$(id -u)" = 0 ] || { echo "slurm-down: error: must run as root" >&2; exit 1; }
for pidfile in /run/slurm/slurmd.pid /run/slurm/slurmctld.pid /run/munge/munged.pid; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if [ -r "/proc/$pid/stat" ] && [ "$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f1)" != Z ]; then
        kill "$pid" 2>/dev/null || true
        i=0
        while [ -r "/proc/$pid/stat" ] && [ "$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f1)" != Z ] && [ $i -lt 50 ]; do
            sleep 0.2; i=$((i + 1))
        done
    fi
    rm -f "$pidfile"
    echo "slurm-down: stopped $(basename "$pidfile" .pid)"
done
