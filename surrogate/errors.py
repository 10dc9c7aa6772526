"""Exceptions raised by the surrogate package.

``surrogate`` must not import ``controller`` (dependency direction), so it
defines its own error type.  The controller is expected to catch
:class:`SurrogateError` and re-raise it as a user-facing ``InfrarsiError``.
"""

from __future__ import annotations


class SurrogateError(ValueError):
    """Invalid input to a surrogate model (bad shape, non-finite value, unknown kind).

    The message is one line and names the argument that is wrong.
    """
