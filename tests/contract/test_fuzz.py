"""Fuzzing ``contract check`` and ``db upgrade|current`` with generated garbage.

Properties, for every input: a non-zero exit comes with exactly one line on stderr (``infrarsi: ...``), no
traceback, no password, every problem on stdout is one ``file:line field: message`` line, and each run ends within
a bounded time.  Most examples use the in-process entry point (``infrarsi.controller.cli.main.main``); a few run
the real CLI in a subprocess.  Hypothesis writes no example database (``database=None``), so runs are
reproducible from the printed seed and leave nothing in the tree.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from infrarsi.controller.cli import main as cli_main
from tests.campaign.helpers import cli_env
from tests.contract.test_contract_errors import VALID

SECRET = "Fz-" + uuid.uuid4().hex
#: seconds one in-process run may take on a loaded 2-core machine (a real contract takes milliseconds)
BOUND_S = 8.0
PROBLEM = re.compile(r"^c\.yaml(:\d+ (\(top level\)|\(yaml\)|\(file\)|\S+): .+|: .+)$")
FUZZ = settings(max_examples=int(os.environ.get("INFRARSI_FUZZ_EXAMPLES", "60")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NASTY = ["*", "&a ", "*a", "!!int ", "!!python/object:os.system ", "[", "]", "{", "}", ": ", "\t", "- ", "\n  ",
         "'", '"', "***", "MY-VAR", "..", "/", "{knobs}", "9" * 30, "0x" + "f" * 40, ".nan", ".inf", "~", "? ",
         "<<: ", "%YAML 1.1\n", "---\n", "...\n", "\\", "\u2028", "\ufeff", "é", "\x85", "#", "|\n", ">-\n",
         "99999999999", "-1", "0", "true", "null", "2001-13-45", "1:2:3", "\x07"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fuzz")
    (d / "train.py").write_text("print('hi')\n")
    (d / "data.py").write_text("X = 1\n")
    return d


def run(*argv: str) -> tuple[int, str, str, float]:
    """``infrarsi argv...`` in-process: (exit status, stdout, stderr, seconds)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli_main.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue(), time.monotonic() - t0


def assert_clean(code: int, out: str, err: str, seconds: float) -> None:
    assert seconds < BOUND_S, seconds
    assert "Traceback" not in out + err and SECRET not in out + err, err
    assert "internal error" not in err, err
    if code == 0:
        assert err == "", err
    else:
        assert err.count("\n") == 1 and err.startswith("infrarsi: error: "), err


def check_text(workdir: Path, data: str | bytes) -> None:
    path = workdir / "c.yaml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    code, out, err, seconds = run("contract", "check", str(path))
    assert_clean(code, out, err, seconds)
    for line in out.splitlines():
        assert code == 0 or PROBLEM.match(line), line
        assert len(line) <= 400


@FUZZ
@given(data=st.binary(max_size=4096))
def test_random_bytes(workdir: Path, data: bytes) -> None:
    check_text(workdir, data)


_scalars = (st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats()
            | st.text(max_size=40) | st.sampled_from(NASTY))
_trees = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=6)
                      | st.dictionaries(st.text(max_size=12) | st.sampled_from(NASTY), kids, max_size=6),
                      max_leaves=40)


def _dump(obj: Any) -> str:
    buf = io.StringIO()
    YAML(typ="safe", pure=True).dump(obj, buf)
    return buf.getvalue()


@FUZZ
@given(tree=_trees)
def test_random_yaml(workdir: Path, tree: Any) -> None:
    check_text(workdir, _dump(tree))


def _valid_tree() -> dict[str, Any]:
    return YAML(typ="safe", pure=True).load(VALID)


_paths = st.lists(st.sampled_from(["name", "launch", "command", "env", "partition", "time_limit", "nodes",
                                   "workload", "seq_len", "tokens_per_update", "knobs", 0, 1, 2, "values",
                                   "reference", "apply", "flag", "budget", "trials", "couplings", "equals",
                                   "editable_files", "frozen_files", "trial", "window", "repo"]),
                  min_size=1, max_size=4)


@FUZZ
@given(edits=st.lists(st.tuples(_paths, _trees), min_size=1, max_size=4))
def test_structured_mutations_of_a_valid_contract(workdir: Path, edits: list[tuple[list[Any], Any]]) -> None:
    """Set fields of the valid contract (at any depth) to generated values."""
    tree = _valid_tree()
    for path, value in edits:
        node: Any = tree
        for part in path[:-1]:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                break
        last = path[-1]
        if isinstance(node, dict):
            node[last] = value
        elif isinstance(node, list) and isinstance(last, int) and last < len(node):
            node[last] = value
    check_text(workdir, _dump(tree))


@FUZZ
@given(ops=st.lists(st.tuples(st.sampled_from(["insert", "delete", "replace"]), st.floats(0, 1),
                              st.integers(1, 20), st.sampled_from(NASTY) | st.text(max_size=8)),
                    min_size=1, max_size=6))
def test_text_mutations_of_a_valid_contract(workdir: Path, ops: list[tuple[str, float, int, str]]) -> None:
    """Insert, delete and replace characters of the valid contract's text."""
    text = VALID
    for op, where, size, payload in ops:
        i = int(where * len(text))
        if op == "insert":
            text = text[:i] + payload + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + size:]
        else:
            text = text[:i] + payload + text[i + len(payload):]
    check_text(workdir, text)


_hosts = st.sampled_from(["127.0.0.1", "localhost", "", "[::1]", "127.0.0.1:1", "127.0.0.1:5432", "127.0.0.1:x",
                          "127.0.0.1:99999", "%zz", "[", "127.0.0.1:1,127.0.0.1:2"])
_words = st.text(st.characters(blacklist_categories=["Cs"]), max_size=12)


@st.composite
def _urls(draw: st.DrawFn, sqlite_dir: str) -> str:
    scheme = draw(st.sampled_from(["postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2", "sqlite",
                                   "mysql", "", "garbage", "http", "sqlite+pysqlite", "PostgreSQL"]))
    if scheme.startswith("sqlite") and draw(st.booleans()):
        return f"{scheme}:///{sqlite_dir}/{draw(_words).replace('/', '_').replace(chr(0), '')}.sqlite"
    user = draw(st.sampled_from(["postgres", "u", ""]) | _words.filter(lambda w: "@" not in w and "/" not in w))
    password = draw(st.sampled_from(["", SECRET, f"{SECRET}@x", f"{SECRET}/y", f"{SECRET}:z"]))
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    query_key = draw(st.sampled_from(["sslmode", "application_name", "options", "foo"]))
    query = draw(st.sampled_from(["", f"?password={SECRET}", f"?PASSWORD={SECRET}",
                                  f"?sslmode=disable&password={SECRET}", f"?{query_key}={draw(_words)}"]))
    sep = draw(st.sampled_from(["://", ":/", ":", "//", ""]))
    return f"{scheme}{sep}{auth}{draw(_hosts)}/{draw(_words)}{query}"


@FUZZ
@given(data=st.data())
def test_random_database_urls(workdir: Path, data: st.DataObject) -> None:
    url = data.draw(_urls(str(workdir / "dbs")))
    verb = data.draw(st.sampled_from(["upgrade", "current"]))
    assert_clean(*run("db", verb, "--url", url))


@FUZZ
@given(revision=st.text(max_size=30) | st.sampled_from(["head", "base", "+1", "-1", "0001", "heads", "0002@head",
                                                        "zzz", ":", "0001:0002", "head-1"]))
def test_random_revisions(workdir: Path, revision: str) -> None:
    url = f"sqlite:///{workdir / 'rev.sqlite'}"
    assert_clean(*run("db", "upgrade", "--revision", revision, "--url", url))


def test_real_cli_on_garbage(workdir: Path, tmp_path: Path) -> None:
    """A few inputs through the installed console entry point in a subprocess."""
    rng = __import__("random").Random(11)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    cases: list[tuple[str, ...]] = []
    for i, data in enumerate([bytes(rng.randrange(256) for _ in range(2048)),
                              ("a: &a [x, x, x, x, x, x, x, x]\nb: [*a, *a, *a, *a, *a, *a, *a, *a]\n" + VALID).encode(),
                              VALID.replace("  seq_len: 64\n", "  seq_len: " + "7" * 5000 + "\n").encode()]):
        p = tmp_path / f"c{i}.yaml"
        p.write_bytes(data)
        cases.append(("contract", "check", str(p)))
    cases += [("db", "upgrade", "--url", f"sqlite:///{garbage}"),
              ("db", "upgrade", "--url", f"postgresql://u@127.0.0.1:1/x?password={SECRET}"),
              ("db", "current", "--url", f"postgresql://u:{SECRET}@[/x")]
    env = cli_env(tmp_path / "home")
    for args in cases:
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "infrarsi.controller.cli.main", *args], env=env,
                           capture_output=True, text=True, timeout=120)
        seconds = time.monotonic() - t0
        assert seconds < 60, (args, seconds)  # interpreter start-up included
        assert p.returncode != 0 and p.stderr.count("\n") == 1, (args, p.stderr)
        assert "Traceback" not in p.stderr and SECRET not in p.stdout + p.stderr, (args, p.stderr)
