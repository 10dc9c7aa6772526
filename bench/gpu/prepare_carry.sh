#!/usr/bin/env bash
# Fill .whl/ (ignored by git; carried to the device machine) with what the device image lacks: the runtime wheels
# for CPython 3.12, infrarsi's own wheel built from this checkout, and Debian's bubblewrap package.
#   bash bench/gpu/prepare_carry.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
for p in 'sqlalchemy>=2.0,<2.1' alembic pydantic pydantic-core annotated-types typing-inspection mako ruamel.yaml \
         ruamel.yaml.clib greenlet; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d .whl "$p"
done
rm -f .whl/infrarsi-*.whl
tmp=$(mktemp -d)
git archive HEAD | tar -x -C "$tmp"
python3 -m build --wheel --outdir .whl "$tmp" >/dev/null
rm -rf "$tmp"
(cd .whl && apt-get download bubblewrap >/dev/null 2>&1) || echo "prepare_carry: could not download bubblewrap" >&2
ls .whl
