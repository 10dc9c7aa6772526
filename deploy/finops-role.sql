-- Create (or refresh) a read-only role for finance: it can read the finops_* views and nothing else
-- (not even alembic_version: `infrarsi finops` reads the views only, tests/cli/test_finops_cli.py).
-- Run as a superuser against the infrarsi database, e.g.
--   psql "$INFRARSI_DATABASE_URL" -v role=infrarsi_finops -v password="'change-me'" -f deploy/finops-role.sql
\if :{?role}
\else
\set role infrarsi_finops
\endif
\if :{?password}
\else
\set password NULL
\endif
SELECT format('CREATE ROLE %I LOGIN', :'role')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I PASSWORD %s', :'role', :'password') WHERE :'password' <> 'NULL' \gexec
SELECT format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), :'role') \gexec
SELECT format('GRANT USAGE ON SCHEMA public TO %I', :'role') \gexec
SELECT format('REVOKE ALL ON ALL TABLES IN SCHEMA public FROM %I', :'role') \gexec
SELECT format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM %I', :'role') \gexec
SELECT format('GRANT SELECT ON %I TO %I', v, :'role')
FROM unnest(ARRAY['finops_failed_gpu_hours', 'finops_campaign_cost', 'finops_cost_per_verified_pct',
                   'finops_llm_cost', 'finops_proposer_cost']) AS v \gexec
SELECT format('ALTER ROLE %I SET default_transaction_read_only = on', :'role') \gexec
