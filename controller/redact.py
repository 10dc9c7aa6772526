"""Mask secrets in database URLs and in free text (exception messages) before anything is printed or logged.

Two functions, both total (they never raise, whatever the input):

- :func:`redact_url` masks the password of one URL: ``scheme://user:pass@host`` -> ``scheme://user:***@host``,
  and the value of password-like query parameters (``?password=``, ``&password=``, ``sslpassword``, ...).
- :func:`redact_text` does the same for every URL inside a longer text and also masks libpq-style
  ``password=value`` key/values (``password='a b'``, ``PGPASSWORD=x``, ``db_password=x``).

Masking errs on the side of hiding too much: everything between ``scheme://user:`` and the last ``@`` of
the same whitespace-free word is replaced, so a password containing ``@`` or ``/`` is still hidden.  The
contract is: a password that appears in the input in one of these forms never appears in the output.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://[user]:password@  (password: the longest run without whitespace up to the last '@' of the word)
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@?#]*):(?P<pw>\S*)@")
# key=value pairs whose key names a password or secret, in a query string, a libpq DSN or an env dump
_KEYS = r"[A-Za-z_]*(?:password|passwd|passphrase|secret|token)|pwd|api_?key"
_KV = re.compile(
    rf"(?P<key>\b(?:{_KEYS}))(?P<eq>\s*=\s*)"
    r"(?P<val>'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s&;,'\")]*)",
    re.IGNORECASE,
)


def _mask_userinfo(text: str) -> str:
    return _USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", text)


def _mask_kv(text: str) -> str:
    return _KV.sub(lambda m: f"{m.group('key')}{m.group('eq')}{MASK}", text)


def redact_url(url: str) -> str:
    """``url`` with its password and password-like query values replaced by ``***`` (never raises)."""
    try:
        return _mask_kv(_mask_userinfo(str(url)))
    except Exception:  # pragma: no cover - regexes on a str do not fail; stay total anyway
        return MASK


def redact_text(text: str) -> str:
    """``text`` with every URL password and ``password=value`` pair masked (never raises)."""
    try:
        return _mask_kv(_mask_userinfo(str(text)))
    except Exception:  # pragma: no cover
        return MASK
