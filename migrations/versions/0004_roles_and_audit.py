"""identities, row-level security and an audit column on events

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

Both dialects:
- ``events.actor``: who made the event.  On PostgreSQL a trigger sets it to ``session_user`` on every insert (a
  client cannot forge it); on SQLite (single user) the store writes the OS user.

PostgreSQL only (the database enforces what the CLI allows; ``docs/admin.md``):
- ``infrarsi_sees_all(role)``: true for superusers and members of ``infrarsi_admin`` or ``infrarsi_daemon``.
  Missing group roles are simply not matched, so this revision runs before ``deploy/roles.sql`` creates them.
- A BEFORE INSERT trigger on ``campaigns`` sets ``owner`` to ``current_user`` unless the inserting role sees all
  (an admin or the daemon may record a campaign for someone else; a researcher cannot).
- Row-level security on campaigns (own rows), and on trials, cost_ledger, observations, receipts, verdicts and
  events through their campaign; writes to them are for roles that see all (table grants narrow them further).
  The table owner (the role that runs migrations) and superusers bypass RLS; the finops views run as their owner,
  so finance reads every campaign's cost through them.
- ``infrarsi_cancel_campaign(id, reason)``: the researchers' only write path to a campaign (SECURITY DEFINER):
  the session user must own the campaign or see all; it sets state ``cancelled`` (a no-op on a terminal
  campaign), records a ``campaign.state`` event and returns the resulting state.  Not visible: SQLSTATE P0002.
Grants are not given here: ``deploy/roles.sql`` creates the group roles and grants per table.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: tables whose rows belong to a campaign's owner, and how a row finds its campaign
CHILDREN = {
    "trials": "EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign_id)",
    "cost_ledger": "EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign_id)",
    "observations": "EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign_id)",
    "receipts": "EXISTS (SELECT 1 FROM trials t WHERE t.id = trial_id)",
    "verdicts": "EXISTS (SELECT 1 FROM trials t WHERE t.id = trial_id)",
}
#: evaluated once per statement (an InitPlan), not once per row
SEES_ALL = "(SELECT infrarsi_sees_all(current_user))"


def _pg_upgrade() -> None:
    schema = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar()
    op.execute(
        "CREATE FUNCTION infrarsi_sees_all(who name) RETURNS boolean LANGUAGE sql STABLE AS $$ "
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = who AND r.rolsuper) "
        "OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles g WHERE g.rolname IN ('infrarsi_admin', 'infrarsi_daemon') "
        "AND pg_catalog.pg_has_role(who, g.oid, 'MEMBER')) $$"
    )
    op.execute(
        "CREATE FUNCTION infrarsi_campaign_owner() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.owner IS NULL OR NOT infrarsi_sees_all(current_user) THEN NEW.owner := current_user; END IF; "
        "RETURN NEW; END $$"
    )
    op.execute("CREATE TRIGGER campaigns_owner BEFORE INSERT ON campaigns "
               "FOR EACH ROW EXECUTE FUNCTION infrarsi_campaign_owner()")
    op.execute(
        "CREATE FUNCTION infrarsi_event_actor() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "NEW.actor := session_user; RETURN NEW; END $$"
    )
    op.execute("CREATE TRIGGER events_actor BEFORE INSERT ON events "
               "FOR EACH ROW EXECUTE FUNCTION infrarsi_event_actor()")

    op.execute("ALTER TABLE campaigns ENABLE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY campaigns_read ON campaigns FOR SELECT USING ({SEES_ALL} OR owner = current_user)")
    op.execute(f"CREATE POLICY campaigns_insert ON campaigns FOR INSERT WITH CHECK ({SEES_ALL} OR owner = current_user)")
    op.execute(f"CREATE POLICY campaigns_update ON campaigns FOR UPDATE USING ({SEES_ALL}) WITH CHECK ({SEES_ALL})")
    op.execute(f"CREATE POLICY campaigns_delete ON campaigns FOR DELETE USING ({SEES_ALL})")
    for table, through in CHILDREN.items():
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY {table}_read ON {table} FOR SELECT USING ({SEES_ALL} OR {through})")
        op.execute(f"CREATE POLICY {table}_write ON {table} FOR ALL USING ({SEES_ALL}) WITH CHECK ({SEES_ALL})")
    op.execute("ALTER TABLE events ENABLE ROW LEVEL SECURITY")
    own_event = ("(campaign_id IS NULL AND actor = session_user) "
                 "OR EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign_id)")
    op.execute(f"CREATE POLICY events_read ON events FOR SELECT USING ({SEES_ALL} OR {own_event})")
    op.execute(f"CREATE POLICY events_insert ON events FOR INSERT WITH CHECK ({SEES_ALL} OR campaign_id IS NULL "
               "OR EXISTS (SELECT 1 FROM campaigns c WHERE c.id = campaign_id))")

    op.execute(
        f"""CREATE FUNCTION infrarsi_cancel_campaign(cid integer, reason text DEFAULT NULL) RETURNS text
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        DECLARE c record; why text;
        BEGIN
          SELECT id, owner, state INTO c FROM "{schema}".campaigns WHERE id = cid FOR UPDATE;
          IF NOT FOUND OR (c.owner <> session_user AND NOT "{schema}".infrarsi_sees_all(session_user)) THEN
            RAISE EXCEPTION 'no campaign %', cid USING ERRCODE = 'P0002';
          END IF;
          IF c.state IN ('done', 'failed', 'cancelled') THEN RETURN c.state; END IF;
          why := coalesce(reason, 'cancelled by ' || session_user);
          UPDATE "{schema}".campaigns SET state = 'cancelled', error = why, updated_at = now() WHERE id = cid;
          INSERT INTO "{schema}".events (campaign_id, kind, payload, created_at)
          VALUES (cid, 'campaign.state', json_build_object('from', c.state, 'to', 'cancelled', 'error', why), now());
          RETURN 'cancelled';
        END $$"""
    )
    op.execute("REVOKE ALL ON FUNCTION infrarsi_cancel_campaign(integer, text) FROM PUBLIC")


def _pg_downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS infrarsi_cancel_campaign(integer, text)")
    op.execute("DROP POLICY IF EXISTS events_read ON events")
    op.execute("DROP POLICY IF EXISTS events_insert ON events")
    op.execute("ALTER TABLE events DISABLE ROW LEVEL SECURITY")
    for table in CHILDREN:
        op.execute(f"DROP POLICY IF EXISTS {table}_read ON {table}")
        op.execute(f"DROP POLICY IF EXISTS {table}_write ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    for name in ("read", "insert", "update", "delete"):
        op.execute(f"DROP POLICY IF EXISTS campaigns_{name} ON campaigns")
    op.execute("ALTER TABLE campaigns DISABLE ROW LEVEL SECURITY")
    op.execute("DROP TRIGGER IF EXISTS events_actor ON events")
    op.execute("DROP FUNCTION IF EXISTS infrarsi_event_actor()")
    op.execute("DROP TRIGGER IF EXISTS campaigns_owner ON campaigns")
    op.execute("DROP FUNCTION IF EXISTS infrarsi_campaign_owner()")
    op.execute("DROP FUNCTION IF EXISTS infrarsi_sees_all(name)")


def upgrade() -> None:
    op.add_column("events", sa.Column("actor", sa.String(length=100), nullable=True))
    op.create_index("ix_events_actor", "events", ["actor"])
    if op.get_bind().dialect.name == "postgresql":
        _pg_upgrade()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _pg_downgrade()
    op.drop_index("ix_events_actor", table_name="events")
    if op.get_bind().dialect.name == "sqlite":
        # SQLite cannot drop a column that the append-only triggers of 0002 reference: drop and recreate them
        for verb in ("update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS events_no_{verb}")
        with op.batch_alter_table("events") as batch:
            batch.drop_column("actor")
        for verb in ("UPDATE", "DELETE"):
            op.execute(f"CREATE TRIGGER events_no_{verb.lower()} BEFORE {verb} ON events "
                       "BEGIN SELECT RAISE(ABORT, 'events is append-only'); END")
    else:
        op.drop_column("events", "actor")
