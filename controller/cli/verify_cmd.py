"""Store access for ``infrarsi verify --rejudge`` (the verifier package must not import the controller).

:func:`stored_entries` loads a campaign's stored receipts as the ``(trial_id, raw,
reference_raws, judge_spec)`` tuples that :func:`infrarsi.verifier.judge.rejudge` takes.
"""

from __future__ import annotations

from infrarsi.controller.errors import InfrarsiError


def stored_entries(campaign_id: int, key_file: str | None = None) -> tuple[list[tuple[str, bytes, list[bytes], dict]], bytes]:
    """(entries, master key) for ``campaign_id``; raises :class:`InfrarsiError` naming an unknown campaign or bad key."""
    from infrarsi.controller.settings import Settings
    from infrarsi.controller.store import open_store
    from infrarsi.verifier import signing

    store = open_store()
    try:
        rows = store.list_receipts(campaign_id)
    except KeyError:
        raise InfrarsiError(f"--rejudge {campaign_id}: no such campaign") from None
    if key_file:
        try:
            master = signing.read_key_file(key_file)
        except (OSError, ValueError) as exc:
            raise InfrarsiError(f"--key-file {key_file}: {exc}") from None
    else:
        master = Settings.from_env().master_key()
    entries = [(r.trial_id, bytes(r.raw), [bytes(x) for x in r.reference_raw], dict(r.judge_spec)) for r in rows]
    return entries, master
