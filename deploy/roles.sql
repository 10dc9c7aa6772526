-- infrarsi group roles and their grants (docs/admin.md).  Idempotent: re-run it after every `infrarsi db upgrade`.
-- Run as a superuser (or a role with CREATEROLE that owns the tables) on the infrarsi database, after the schema
-- is at head (row-level security and infrarsi_cancel_campaign come from migration 0004):
--   psql "postgresql://postgres@db-host/infrarsi" -v ON_ERROR_STOP=1 -f deploy/roles.sql
-- Add a person (creates the login role when missing; the password is optional: peer/ident auth needs none):
--   psql ... -v login=alice -v grant=researcher [-v login_password="'change-me'"] -f deploy/roles.sql
--
--   infrarsi_researcher  submit, watch and cancel OWN campaigns; read own trials, verdicts, costs, events
--   infrarsi_admin       a researcher who sees every campaign, cancels any, registers workloads, sets partitions
--   infrarsi_finance     the finops_* views only (deploy/finops-role.sql), read-only
--   infrarsi_daemon      the service role: everything `infrarsi serve` does, plus the leader lease
-- Row-level security (who sees which campaign) is in the schema (migration 0004); these are the table grants.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
SELECT format('CREATE ROLE %I NOLOGIN', r)
FROM unnest(ARRAY['infrarsi_researcher', 'infrarsi_admin', 'infrarsi_finance', 'infrarsi_daemon']) AS r
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) \gexec

SELECT format('GRANT CONNECT ON DATABASE %I TO infrarsi_researcher, infrarsi_admin, infrarsi_daemon',
              current_database()) \gexec
SELECT format('GRANT USAGE ON SCHEMA %I TO infrarsi_researcher, infrarsi_admin, infrarsi_daemon',
              current_schema()) \gexec

-- researchers: read what row-level security lets them see; write a campaign (owner forced to current_user)
-- and events about their own campaigns; change a campaign only through infrarsi_cancel_campaign
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM infrarsi_researcher;
GRANT SELECT ON alembic_version, workloads, campaigns, trials, receipts, verdicts, observations, cost_ledger, events,
    proposer_requests TO infrarsi_researcher;
-- the experience bank: environments for all, observations and effects through row-level security (0005)
GRANT SELECT ON exp_environments, exp_observations, exp_effects TO infrarsi_researcher;
GRANT INSERT ON campaigns, events TO infrarsi_researcher;
SELECT format('GRANT USAGE ON SEQUENCE %s TO infrarsi_researcher', pg_get_serial_sequence(t, 'id'))
FROM unnest(ARRAY['campaigns', 'events']) AS t \gexec
GRANT EXECUTE ON FUNCTION infrarsi_cancel_campaign(integer, text) TO infrarsi_researcher, infrarsi_admin;

-- admins: everything a researcher may, on every campaign (row-level security: infrarsi_sees_all), plus workloads
-- and partitions
GRANT infrarsi_researcher TO infrarsi_admin;
GRANT SELECT, INSERT, UPDATE ON workloads TO infrarsi_admin;
SELECT format('GRANT USAGE ON SEQUENCE %s TO infrarsi_admin', pg_get_serial_sequence('workloads', 'id')) \gexec
GRANT UPDATE (partition) ON campaigns TO infrarsi_admin;
GRANT SELECT ON experience TO infrarsi_admin;
-- the experience bank (migration 0005): `infrarsi bank import` and `bank prune` are admin operations
GRANT SELECT, INSERT, DELETE ON exp_environments, exp_observations, exp_effects TO infrarsi_admin;
SELECT format('GRANT USAGE ON SEQUENCE %s TO infrarsi_admin', pg_get_serial_sequence(t, 'id'))
FROM unnest(ARRAY['exp_environments', 'exp_observations', 'exp_effects']) AS t \gexec

-- the daemon: reads and writes every infrarsi table (events stay append-only by trigger), deletes nothing
GRANT SELECT ON alembic_version TO infrarsi_daemon;
GRANT SELECT, INSERT, UPDATE ON workloads, campaigns, trials, receipts, verdicts, observations, cost_ledger,
    experience TO infrarsi_daemon;
GRANT SELECT, INSERT ON proposer_requests TO infrarsi_daemon;
GRANT SELECT, INSERT, UPDATE ON exp_environments, exp_observations, exp_effects TO infrarsi_daemon;
GRANT SELECT, INSERT ON events TO infrarsi_daemon;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO infrarsi_daemon;
-- = infrarsi.controller.store.lease.grant_sql('infrarsi_daemon'); nobody else gets the lease table
GRANT SELECT, INSERT, UPDATE ON TABLE public.leader_lease TO "infrarsi_daemon";

-- finance: the finops_* views and nothing else
\set role infrarsi_finance
\unset password
\ir finops-role.sql
ALTER ROLE infrarsi_finance NOLOGIN;

-- optional: one person's login role and group
\if :{?login}
\if :{?grant}
\else
\set grant researcher
\endif
SELECT format('DO $g$ BEGIN RAISE EXCEPTION %L; END $g$',
              'grant must be researcher, admin, finance or daemon, not ' || :'grant')
WHERE :'grant' NOT IN ('researcher', 'admin', 'finance', 'daemon') \gexec
SELECT format('CREATE ROLE %I LOGIN', :'login') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'login') \gexec
\if :{?login_password}
SELECT format('ALTER ROLE %I PASSWORD %s', :'login', :'login_password') \gexec
\endif
SELECT format('GRANT %I TO %I', 'infrarsi_' || :'grant', :'login') \gexec
SELECT format('ALTER ROLE %I SET default_transaction_read_only = on', :'login') WHERE :'grant' = 'finance' \gexec
\endif
