"""Mask secrets in database URLs and in free text (exception messages) before anything is printed or logged.

Two functions, both total (they never raise, whatever the input):

- :func:`redact_url` masks the password of one URL: ``scheme://user:pass@host`` -> ``scheme://user:***@host``,
  and the value of password-like query parameters (``?password=``, ``&password=``, ``sslpassword``, ...).
- :func:`redact_text` does the same for every URL inside a longer text and also masks libpq-style
  ``password=value`` key/values (``password='a b'``, ``PGPASSWORD=x``, ``db_password=x``).

Masking errs on the side of hiding too much: in every whitespace-free word holding an ``@``, everything between
the first ``:`` after the scheme and the word's last ``@`` is replaced, so a password containing ``@``, ``/`` or
``:`` is still hidden, and so is one in a malformed URL (``postgresql:/user:pass@host``).  The
contract is: a password that appears in the input in one of these forms never appears in the output.
"""

from __future__ import annotations

import re

MASK = "***"

_WORD = re.compile(r"\S+")
# an optional leading scheme with its separator: "postgresql+psycopg://", "sqlite:////", "x:" (after quotes/parens)
_SCHEME = re.compile(r"^[^A-Za-z]*[A-Za-z][A-Za-z0-9+.\-]*:/*")  # only skipped when it ends with '/' 
# key=value pairs whose key names a password or secret, in a query string, a libpq DSN or an env dump
_KEYS = r"[A-Za-z_]*(?:password|passwd|passphrase|secret|token)|pwd|api_?key"
_KV = re.compile(
    rf"(?P<key>\b(?:{_KEYS}))(?P<eq>\s*=\s*)"
    r"(?P<val>'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s&;,'\")]*)",
    re.IGNORECASE,
)


def _mask_word(word: str) -> str:
    """Within one whitespace-free word holding an ``@``: mask from the first ``:`` after an optional leading
    ``scheme:/`` or ``scheme://`` (from the first ``:`` at all otherwise) up to the word's last ``@`` (``u:p@h`` -> ``u:***@h``).  Linear time, and it also
    catches malformed URLs (``postgresql:/u:p@h``, ``postgresql//u:p@h``) and passwords holding ``@``, ``/``, ``:``."""
    at = word.rfind("@")
    if at < 0:
        return word
    m = _SCHEME.match(word)
    # skip "scheme:/..." only when slashes follow the colon; "x:..." may be a user name ("user:pass@host")
    start = m.end() if m is not None and m.end() <= at and word[m.end() - 1] == "/" else 0
    colon = word.find(":", start, at)
    if colon < 0:
        return word
    return f"{word[:colon + 1]}{MASK}{word[at:]}"


def _mask_userinfo(text: str) -> str:
    if "@" not in text:
        return text
    return _WORD.sub(lambda m: _mask_word(m.group(0)), text)


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
