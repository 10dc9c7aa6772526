"""HMAC-SHA256 signing of receipts over a canonical JSON serialisation.

Canonical form: ``json.dumps(obj, sort_keys=True, separators=(",", ":"),
ensure_ascii=False, allow_nan=False)`` encoded as UTF-8, computed over the receipt
object without its ``signature`` key.  Keys travel as hex text (key files and ``INFRARSI_SIGNING_KEY``).  Per-trial keys are derived from the
controller's master key so a key leaked by one trial cannot sign another's receipt.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any


def derive_trial_key(master_key: bytes, trial_id: str) -> bytes:
    """Per-trial signing key: ``HMAC-SHA256(master_key, trial_id)`` (32 raw bytes)."""
    return hmac.new(master_key, trial_id.encode("utf-8"), hashlib.sha256).digest()


def canonical_bytes(obj: Any) -> bytes:
    """Canonical UTF-8 JSON of ``obj`` (sorted keys, no whitespace); raises ``ValueError`` on NaN/Inf."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def sign(obj: dict[str, Any], key: bytes) -> str:
    """Hex HMAC-SHA256 of the canonical form of ``obj`` minus any ``signature`` key."""
    body = {k: v for k, v in obj.items() if k != "signature"}
    return hmac.new(key, canonical_bytes(body), hashlib.sha256).hexdigest()


def check(obj: dict[str, Any], key: bytes) -> bool:
    """True when ``obj["signature"]`` is the valid signature of ``obj`` under ``key`` (constant-time)."""
    sig = obj.get("signature")
    if not isinstance(sig, str):
        return False
    return hmac.compare_digest(sig, sign(obj, key))


def parse_key(text: str | bytes, where: str = "key") -> bytes:
    """Key bytes from their hex text form (surrounding whitespace ignored); ``ValueError`` if empty or not hex."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    text = text.strip()
    if not text:
        raise ValueError(f"{where}: signing key is empty")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{where}: signing key is not hex text") from None


def read_key_file(path: str) -> bytes:
    """Key from a file holding it as hex text; raises ``OSError`` if unreadable, ``ValueError`` if empty/not hex."""
    with open(path, "rb") as fh:
        return parse_key(fh.read(), path)


def write_key_file(path: str, key: bytes) -> None:
    """Write ``key`` as hex text to ``path``, readable by the owner only (mode 0600)."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")
