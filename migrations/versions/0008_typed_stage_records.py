"""typed stage records (issue 14 item 2): version the scope, doctor and result JSON

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30

``campaigns.scope_json``, ``doctor_json`` and ``result_json`` become typed records
(``controller/store/stage_records.py``: Scope, Doctor, Result) that carry ``schema_version`` and refuse unknown
fields.  This revision converts existing rows: every non-NULL record gets ``schema_version: 1``; a key the
version-1 record does not define moves, unchanged, into the record's ``legacy`` dict (never read, nothing lost);
a NULL where version 1 has a list or dict default (an older ``inputs: null``) is dropped so the default applies.
No column changes.  Downgrade removes ``schema_version`` and puts the ``legacy`` keys back at the top level.
"""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# the version-1 fields as of this revision (kept here, not imported, so the revision never changes meaning);
# the value says whether None is dropped (a field with a list/dict default) or kept (an optional field)
_COMMON = {"schema_version": False, "legacy": True}
_FIELDS: dict[str, dict[str, bool]] = {
    "scope_json": {"commit": False, "prefix": False, "contract_digest": False, "frozen": True, "editable": True,
                   "editable_digests": True, "patches": True, "refused_patches": True, "judge_spec": True,
                   "inputs": True, "patch_provenance": True, "proposal_rounds": True},
    "doctor_json": {"t0": False, "reference_window_means": True, "reference_window_times": False,
                    "sigma_pair": False, "big_knob_gate": False, "promotion_margin": False, "phases": True,
                    "phase_shares": True, "reference_peak_mem_gib": False, "header_extra": True,
                    "experience": False, "experience_coverage": False, "experience_environment": False,
                    "proposer_priors": False, "proposer_priors_dropped": False},
    "result_json": {"budget_at_search_stop": False, "plan": False, "promotion": False},
}
_PLAN = {"config", "patches", "signature"}

_campaigns = sa.table("campaigns", sa.column("id", sa.Integer), sa.column("scope_json", sa.JSON),
                      sa.column("doctor_json", sa.JSON), sa.column("result_json", sa.JSON))


def to_v1(column: str, rec: dict[str, Any]) -> dict[str, Any]:
    """One stored record converted to version 1 (idempotent)."""
    fields = {**_COMMON, **_FIELDS[column]}
    out: dict[str, Any] = {}
    legacy = dict(rec.get("legacy") or {})
    for k, v in rec.items():
        if k == "legacy":
            continue
        if k not in fields:
            legacy[k] = v
        elif v is None and fields[k]:
            continue
        else:
            out[k] = v
    if column == "result_json" and isinstance(out.get("plan"), list):
        plan = []
        for p in out["plan"]:
            extra = {k: v for k, v in p.items() if k not in _PLAN and k not in ("schema_version", "legacy")}
            entry = {k: v for k, v in p.items() if k in _PLAN}
            plan.append({"schema_version": 1, **entry, **({"legacy": extra} if extra else {})})
        out["plan"] = plan
    out["schema_version"] = 1
    if legacy:
        out["legacy"] = legacy
    return out


def to_v0(rec: dict[str, Any]) -> dict[str, Any]:
    """A version-1 record as revision 0007 wrote it."""
    out = {k: v for k, v in rec.items() if k not in ("schema_version", "legacy")}
    out.update(rec.get("legacy") or {})
    if isinstance(out.get("plan"), list):
        out["plan"] = [to_v0(p) if isinstance(p, dict) else p for p in out["plan"]]
    return out


def _convert(fn: Any) -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(_campaigns.c.id, _campaigns.c.scope_json, _campaigns.c.doctor_json,
                                  _campaigns.c.result_json)).all()
    for row in rows:
        values = {}
        for column in _FIELDS:
            rec = getattr(row, column)
            if isinstance(rec, dict):
                values[column] = fn(column, rec)
        if values:
            conn.execute(sa.update(_campaigns).where(_campaigns.c.id == row.id).values(**values))


def upgrade() -> None:
    _convert(to_v1)


def downgrade() -> None:
    _convert(lambda column, rec: to_v0(rec))
