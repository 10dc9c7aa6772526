"""Store access for ``infrarsi verify --rejudge`` (the verifier package must not import the controller).

:func:`stored_entries` loads a campaign's stored receipts as the ``(trial_id, raw, reference_raws, judge_spec,
executor_window)`` tuples that :func:`infrarsi.verifier.judge.rejudge` takes: the executor window is the
trial row's stored ``(start_time, end_time)``, so re-judging re-runs ``executor_clock`` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infrarsi.controller.errors import InfrarsiError

if TYPE_CHECKING:  # pragma: no cover
    from infrarsi.controller.store.base import Store

#: one rejudge entry: trial key, receipt bytes, reference receipt bytes, judge spec, executor (start, end)
Entry = tuple[str, bytes, list[bytes], dict, tuple["float | None", "float | None"]]


def stored_entries(campaign_id: int, key_file: str | None = None,
                   store: "Store | None" = None) -> tuple[list[Entry], bytes]:
    """(entries, master key) for ``campaign_id``; raises :class:`InfrarsiError` naming an unknown campaign or bad key.

    ``store`` defaults to the configured one (``INFRARSI_DATABASE_URL``).  Each entry carries the executor's
    recorded start/end unix times of that trial (``(None, None)`` when the executor recorded none).
    """
    from infrarsi.controller.settings import Settings
    from infrarsi.controller.store import open_store
    from infrarsi.verifier import signing

    store = store if store is not None else open_store()
    try:
        rows = store.list_receipts(campaign_id)
        trials = store.list_trials(campaign_id)
    except KeyError:
        raise InfrarsiError(f"--rejudge {campaign_id}: no such campaign") from None
    if key_file:
        try:
            master = signing.read_key_file(key_file)
        except (OSError, ValueError) as exc:
            raise InfrarsiError(f"--key-file {key_file}: {exc}") from None
    else:
        master = Settings.from_env().master_key()
    windows = {t.trial_key: (t.start_time, t.end_time) for t in trials}
    entries: list[Entry] = [(r.trial_id, bytes(r.raw), [bytes(x) for x in r.reference_raw], dict(r.judge_spec),
                             windows.get(r.trial_id, (None, None))) for r in rows]
    return entries, master
