"""LocalExecutor with real subprocesses: submit/poll/cancel, concurrency and GPU
slots, adoption by a new instance, pending deadline, missing receipt, timeout."""

from __future__ import annotations

import json
from dataclasses import replace
import os
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from infrarsi.controller.errors import ExecutorError
from infrarsi.controller.executors import make_executor
from infrarsi.controller.executors.base import JobHandle, JobStatus, TrialSpec
from infrarsi.controller.executors.local import LocalExecutor
from infrarsi.controller.executors import procs

Waiter = Callable[..., dict[str, JobStatus]]

PY = sys.executable


def _spec(tmp: Path, tid: str, code: str, **kw: object) -> TrialSpec:
    return TrialSpec(trial_id=tid, workdir=tmp, outdir=tmp / tid, argv=(PY, "-c", code), **kw)  # type: ignore[arg-type]


def test_submit_poll_ok_and_values_verbatim(tmp_path: Path, standin: list[str], dump_job: Path, wait_all: Waiter) -> None:
    ex = LocalExecutor(max_concurrent=2, gpus=[], wrapper=standin)
    dump = tmp_path / "dump.json"
    vals = ("$(touch pwned)", '"; kill -9 $$')
    spec = TrialSpec(trial_id="t1", workdir=tmp_path, outdir=tmp_path / "t1", argv=(PY, str(dump_job), str(dump), *vals),
                     env=(("KNOB_A", vals[0]), ("KNOB_B", vals[1])))
    key = tmp_path / "key"
    key.write_bytes(b"secret")
    spec = replace(spec, key_file=key)
    h = ex.submit(spec)
    st = wait_all(ex, [h], timeout=30)["t1"]
    assert (st.state, st.outcome, st.exit_code) == ("finished", "ok", 0), st.reason
    assert st.receipt_path == tmp_path / "t1" / "receipt.json" and st.log_path is not None
    data = json.loads(dump.read_text())
    assert data["argv"] == list(vals)
    assert data["env"] == {"KNOB_A": vals[0], "KNOB_B": vals[1], "INFRARSI_TRIAL_ID": "t1"}
    assert not key.exists(), "the wrapper reads and deletes the key file"
    assert not list(tmp_path.rglob("pwned"))
    assert st.start_time is not None and st.end_time is not None and st.end_time >= st.start_time


def test_concurrency_limit_and_gpu_slots(tmp_path: Path, standin: list[str], dump_job: Path, wait_all: Waiter) -> None:
    ex = LocalExecutor(max_concurrent=2, gpus=["3", "5"], wrapper=standin)
    assert ex.free_slots() == 2
    hs = []
    for i in range(3):
        spec = TrialSpec(trial_id=f"g{i}", workdir=tmp_path, outdir=tmp_path / f"g{i}", gpus_per_node=1,
                         argv=(PY, "-c", f"import time,runpy,sys; sys.argv=['d', {str(tmp_path / f'd{i}.json')!r}]; "
                                         f"runpy.run_path({str(dump_job)!r}, run_name='__main__'); time.sleep(1.0)"))
        hs.append(ex.submit(spec))
    st = ex.poll(hs)
    assert [st[f"g{i}"].state for i in range(3)] == ["running", "running", "pending"]
    assert ex.free_slots() == 0
    seen_running_max = 0

    def count(s: dict) -> None:
        nonlocal seen_running_max
        seen_running_max = max(seen_running_max, sum(v.state == "running" for v in s.values()))

    final = wait_all(ex, hs, timeout=60, on_poll=count, interval=0.1)
    assert all(v.outcome == "ok" for v in final.values())
    assert seen_running_max <= 2
    devices = [json.loads((tmp_path / f"d{i}.json").read_text())["cuda_visible_devices"] for i in range(3)]
    assert sorted(devices[:2]) == ["3", "5"] and devices[2] in ("3", "5")
    assert ex.free_slots() == 2


def test_gpu_request_larger_than_machine_is_refused(tmp_path: Path, standin: list[str]) -> None:
    ex = LocalExecutor(gpus=[], wrapper=standin)
    with pytest.raises(ExecutorError, match="gpus_per_node"):
        ex.submit(_spec(tmp_path, "x", "pass", gpus_per_node=1))
    with pytest.raises(ExecutorError, match="launcher"):
        ex.submit(_spec(tmp_path, "y", "pass", launcher="torchrun-multinode", nodes=2))


def test_cancel_kills_the_whole_tree(tmp_path: Path, standin: list[str]) -> None:
    ex = LocalExecutor(wrapper=standin, kill_grace_s=3)
    pidfile = tmp_path / "grandchild.pid"
    code = ("import subprocess,sys,time; p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(120)'], "
            f"start_new_session=True); open({str(pidfile)!r},'w').write(str(p.pid)); time.sleep(120)")
    h = ex.submit(_spec(tmp_path, "c", code))
    deadline = time.monotonic() + 20
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    assert procs.is_alive(grandchild)
    ex.cancel(h)
    st = ex.poll([h])["c"]
    assert (st.state, st.outcome) == ("finished", "cancelled"), st.reason
    deadline = time.monotonic() + 5
    while procs.is_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not procs.is_alive(grandchild), "a grandchild in its own session survived cancel"
    ex.cancel(h)  # idempotent
    assert ex.poll([h])["c"].outcome == "cancelled"


def test_adoption_by_a_new_instance(tmp_path: Path, standin: list[str], wait_all: Waiter) -> None:
    ex1 = LocalExecutor(max_concurrent=1, wrapper=standin)
    quick = ex1.submit(_spec(tmp_path, "quick", "print('done')"))
    wait_all(ex1, [quick], timeout=30)
    slow = ex1.submit(_spec(tmp_path, "slow", "import time; time.sleep(2); raise SystemExit(3)"))
    queued = ex1.submit(_spec(tmp_path, "queued", "print('later')"))
    assert ex1.poll([slow, queued])["queued"].state == "pending"
    stored = [json.loads(json.dumps(h.to_dict())) for h in (quick, slow, queued)]
    del ex1  # the "daemon" restarts; its child keeps running
    ex2 = LocalExecutor(max_concurrent=1, wrapper=standin)
    handles = [JobHandle.from_dict(d) for d in stored]
    first = ex2.poll(handles)
    assert first["quick"].outcome == "ok"
    assert first["slow"].state == "running"
    assert first["queued"].state == "pending"
    final = wait_all(ex2, handles, timeout=60)
    assert (final["slow"].outcome, final["slow"].exit_code) == ("crash", 3), final["slow"].reason
    assert final["queued"].outcome == "ok"


def test_unknown_handle_is_lost(tmp_path: Path, standin: list[str]) -> None:
    ex = LocalExecutor(wrapper=standin)
    h = JobHandle(trial_id="ghost", backend="local", job_id="local-0", submit_time=time.time(), outdir=str(tmp_path))
    st = ex.poll([h])["ghost"]
    assert st.state == "lost" and "no launch record" in st.reason


def test_pending_deadline_cancels_and_accounts(tmp_path: Path, standin: list[str]) -> None:
    ex = LocalExecutor(max_concurrent=1, wrapper=standin)
    blocker = ex.submit(_spec(tmp_path, "blocker", "import time; time.sleep(3)"))
    waiting = ex.submit(_spec(tmp_path, "waiting", "print('never')", pending_deadline_s=0.5))
    deadline = time.monotonic() + 10  # the 0.5 s pending deadline passes while the blocker holds the only slot
    while True:
        st = ex.poll([blocker, waiting])
        if st["waiting"].state == "finished" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert st["blocker"].state == "running"
    assert (st["waiting"].state, st["waiting"].outcome) == ("finished", "cancelled")
    assert "deadline" in st["waiting"].reason
    ex.cancel(blocker)
    assert not (tmp_path / "waiting" / "job.log").exists()


def test_missing_receipt_is_a_crash_with_reason(tmp_path: Path, standin: list[str], wait_all: Waiter) -> None:
    # the stand-in reads it from its environment: spec.env is the only way in (the executor allow-lists the rest)
    ex = LocalExecutor(wrapper=standin)
    h = ex.submit(_spec(tmp_path, "nr", "print('ran')", env=(("STANDIN_NO_RECEIPT", "1"),)))
    st = wait_all(ex, [h], timeout=30)["nr"]
    assert st.outcome == "crash" and "no receipt" in st.reason


def test_wrapper_timeout_and_oom_classified(tmp_path: Path, standin: list[str], wait_all: Waiter) -> None:
    ex = LocalExecutor(max_concurrent=2, wrapper=standin)
    t = ex.submit(_spec(tmp_path, "to", "import time; time.sleep(30)", time_limit_s=1))
    o = ex.submit(_spec(tmp_path, "oom", "import sys; print('torch.OutOfMemoryError: CUDA out of memory. "
                                         "Tried to allocate 2.00 GiB; 0.50 GiB is free'); sys.exit(1)"))
    st = wait_all(ex, [t, o], timeout=30)
    assert st["to"].outcome == "timeout", st["to"].reason
    assert st["oom"].outcome == "oom", st["oom"].reason


def test_make_executor_factory(tmp_path: Path) -> None:
    ex = make_executor("local", max_concurrent=3, gpus=[])
    assert isinstance(ex, LocalExecutor) and ex.free_slots() == 3
    with pytest.raises(ExecutorError, match="unknown executor"):
        make_executor("kubernetes")
    with pytest.raises(ExecutorError, match="bad settings"):
        make_executor("local", nonsense=1)


def test_handle_round_trip() -> None:
    h = JobHandle(trial_id="t", backend="slurm", job_id="42", submit_time=1.5, outdir="/o")
    assert JobHandle.from_dict(json.loads(h.to_json())) == h
    assert h.key == ("42", 1.5)
    with pytest.raises(ExecutorError, match="handle"):
        JobHandle.from_dict({"trial_id": "t"})


def test_adopt_finds_a_job_launched_by_an_earlier_process(tmp_path: Path, standin: list[str],
                                                          wait_all: Waiter) -> None:
    ex1 = LocalExecutor(wrapper=standin)
    h = ex1.submit(_spec(tmp_path, "orphan", "print('x')"))
    ex2 = LocalExecutor(wrapper=standin)
    adopted = ex2.adopt("orphan", tmp_path / "orphan")
    assert adopted == h
    assert ex2.adopt("other-trial", tmp_path / "orphan") is None
    assert ex2.adopt("nothing", tmp_path / "nothing") is None
    assert wait_all(ex2, [adopted], timeout=30)["orphan"].outcome == "ok"


def test_handle_without_outdir_is_lost_not_read_from_cwd(tmp_path: Path, standin: list[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ex1 = LocalExecutor(wrapper=standin)
    h = ex1.submit(_spec(tmp_path, "here", "print(1)"))
    monkeypatch.chdir(tmp_path / "here")  # its launch file is in the cwd now
    bare = JobHandle(trial_id="here", backend="local", job_id=h.job_id, submit_time=h.submit_time)
    st = LocalExecutor(wrapper=standin).poll([bare])["here"]
    assert st.state == "lost"
