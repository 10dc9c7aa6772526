#!/usr/bin/env bash
# Make sure bubblewrap (`bwrap`), the sandbox every trial runs in, is installed and works here.
# Installs it with the system's package manager when missing (root, or sudo without a password).
# Exit 0 when `bwrap` can create the sandbox's namespaces; 1 with the reason otherwise.
set -euo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi; }
if ! command -v bwrap >/dev/null 2>&1; then
    echo "bubblewrap.sh: installing bubblewrap" >&2
    if command -v apt-get >/dev/null 2>&1; then
        (as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap \
            || (as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap)) \
            >/dev/null 2>&1 || true
    elif command -v dnf >/dev/null 2>&1; then
        as_root dnf install -y -q bubblewrap >/dev/null 2>&1 || true
    fi
fi
if ! command -v bwrap >/dev/null 2>&1; then
    echo "bubblewrap.sh: error: bwrap is not installed and could not be installed here; install the 'bubblewrap'" \
         "package, or run trials unsandboxed on a trusted single-user machine with INFRARSI_ISOLATION=none" >&2
    exit 1
fi
if ! out=$(bwrap --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev true 2>&1); then
    echo "bubblewrap.sh: error: bwrap cannot create namespaces here (${out:-exit $?}); enable unprivileged user" \
         "namespaces, or use INFRARSI_ISOLATION=none on a trusted single-user machine" >&2
    exit 1
fi
