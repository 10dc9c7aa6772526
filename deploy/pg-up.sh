#!/bin/sh
# Make sure the local PostgreSQL server answers on 127.0.0.1:5432; start the Debian cluster when it is down.
set -eu
if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    echo "pg-up: PostgreSQL is up"; exit 0
fi
ver=$(ls /etc/postgresql | sort -V | tail -n 1)
echo "pg-up: starting PostgreSQL $ver"
pg_ctlcluster --skip-systemctl-redirect "$ver" main start
for i in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p 5432 && { echo "pg-up: PostgreSQL is up"; exit 0; }
    sleep 1
done
echo "pg-up: error: PostgreSQL did not come up on 127.0.0.1:5432" >&2
exit 1
