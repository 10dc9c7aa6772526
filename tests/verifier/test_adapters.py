"""Stack adapters with real torch on the CPU: plain loop, DDP (2 gloo ranks under torchrun), HF callback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from infrarsi.verifier.adapters import torch_loop as tl  # noqa: E402
from infrarsi.verifier.emit import Receipts  # noqa: E402

LOOP = """
import sys, torch
from infrarsi.verifier.adapters.torch_loop import ReceiptLogger
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
data = [torch.randn(16, 8, generator=g) for _ in range(5)]
rl = ReceiptLogger(model, opt, seq_len=8, tokens_per_update=128)
for x in data:
    rl.begin(x, tokens=128)
    loss = model(x).pow(2).mean(); loss.backward()
    rl.grads()
    opt.step(); opt.zero_grad()
    rl.end(loss)
rl.finish(eval_loss=model(data[0]).pow(2).mean())
"""


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_helpers_are_sensitive_to_what_matters():
    torch.manual_seed(0)
    a = torch.nn.Linear(4, 2)
    torch.manual_seed(0)
    b = torch.nn.Linear(4, 2)
    torch.manual_seed(1)
    c = torch.nn.Linear(4, 2)
    assert tl.model_digest(a) == tl.model_digest(b) != tl.model_digest(c)
    assert tl.model_digest(torch.nn.Linear(4, 3)) != tl.model_digest(a)
    assert tl.param_count(a) == 10
    x = torch.arange(12.0).reshape(3, 4)
    assert tl.batch_digest(x) == tl.batch_digest(x.clone()) != tl.batch_digest(x.flip(0))
    assert tl.peak_mem_gib() is None  # CPU
    assert tl.software_versions()["torch"] == torch.__version__


def test_plain_loop_adapter_writes_header_updates_footer(tmp_path):
    p = tmp_path / "rx.jsonl"
    env = dict(os.environ, INFRARSI_RECEIPT_PATH=str(p))
    env.pop("INFRARSI_RECEIPT_FD", None)
    subprocess.run([sys.executable, "-c", LOOP], env=env, check=True, timeout=120)
    lines = _lines(p)
    h, ups, f = lines[0], lines[1:-1], lines[-1]
    assert h["kind"] == "header" and h["params"] == 8 * 16 + 16 + 16 + 1 and h["tokens_per_update"] == 128
    assert [u["index"] for u in ups] == [1, 2, 3, 4, 5] and [u["opt_step"] for u in ups] == [1, 2, 3, 4, 5]
    assert all(u["grad_norm"] > 0 and u["step_time_s"] > 0 and u["lr"] == 0.1 for u in ups)
    assert len({u["batch_digest"] for u in ups}) == 5
    assert ups[-1]["loss"] < ups[0]["loss"]
    assert f["kind"] == "footer" and f["completed"] == 5 and f["extra"]["eval"] > 0
    norms = f["extra"]["param_norms"]
    assert list(norms) == ["0.weight", "0.bias", "2.weight", "2.bias"] and all(v > 0 for v in norms.values())
    assert sum(1 for ln in LOOP.splitlines() if "rl." in ln or "ReceiptLogger" in ln) <= 15


DDP = """
import os, sys, torch, torch.distributed as dist
from infrarsi.verifier.adapters.ddp import DDPReceiptLogger
ddp = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
if ddp:
    dist.init_process_group("gloo")
rank, world = (dist.get_rank(), dist.get_world_size()) if ddp else (0, 1)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
net = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
data = [torch.randn(16, 8, generator=g) for _ in range(3)]
rl = DDPReceiptLogger(net, opt, seq_len=8)
for x in data:
    shard = x.chunk(world)[rank]
    rl.begin(shard)
    loss = net(shard).pow(2).mean(); loss.backward()
    rl.grads(); opt.step(); opt.zero_grad(); rl.end(loss)
rl.finish()
if ddp:
    dist.barrier()  # neither rank tears gloo down while the other still talks (an intermittent SIGABRT otherwise)
    dist.destroy_process_group()
    sys.stdout.flush(); sys.stderr.flush(); os._exit(0)  # no interpreter teardown: gloo threads can abort it
"""


def test_ddp_adapter_matches_a_single_process_run(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    outs = {}
    for name, cmd in {"single": [sys.executable, str(script)],
                      "ddp": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                              str(script)]}.items():
        p = tmp_path / f"{name}.jsonl"
        env = dict(os.environ, INFRARSI_RECEIPT_PATH=str(p), OMP_NUM_THREADS="1")
        for k in ("INFRARSI_RECEIPT_FD", "RANK", "WORLD_SIZE"):
            env.pop(k, None)
        for attempt in (1, 2):  # torchrun's --standalone rendezvous on a loaded 2-core box can fail to start: retry once
            p.unlink(missing_ok=True)
            proc = subprocess.run(cmd, env=env, timeout=180, capture_output=True, text=True)
            if proc.returncode == 0:
                break
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs[name] = _lines(p)
    single, ddp = outs["single"], outs["ddp"]
    assert len(ddp) == len(single) == 5                       # rank 1 wrote nothing
    assert ddp[0]["world_size"] == 2 and single[0]["world_size"] == 1
    assert ddp[0]["model_digest"] == single[0]["model_digest"]
    for a, b in zip(single[1:-1], ddp[1:-1]):
        assert a["batch_digest"] == b["batch_digest"] and a["tokens"] == b["tokens"] == 128
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
    sn, dn = single[-1]["extra"]["param_norms"], ddp[-1]["extra"]["param_norms"]   # the checksum ignores DDP
    assert list(sn) == list(dn) and all(dn[k] == pytest.approx(sn[k], rel=1e-5) for k in sn)


def test_hf_module_imports_without_transformers_and_callback_needs_it():
    from infrarsi.verifier.adapters import hf

    try:
        import transformers  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError):
            hf.receipt_callback(seq_len=8)
        return
    cb = hf.receipt_callback(seq_len=8, receipts=Receipts(None))
    assert hasattr(cb, "on_step_end")


def test_hf_trainer_end_to_end(tmp_path):
    transformers = pytest.importorskip("transformers")
    from infrarsi.verifier.adapters.hf import receipt_callback

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return 32

        def __getitem__(self, i):
            ids = torch.arange(8) + i % 4
            return {"input_ids": ids, "labels": ids}

    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg)
    p = tmp_path / "rx.jsonl"
    with open(p, "w") as fh:
        args = transformers.TrainingArguments(str(tmp_path / "o"), per_device_train_batch_size=4, max_steps=3,
                                              logging_steps=1, report_to=[], use_cpu=True)
        transformers.Trainer(model=model, args=args, train_dataset=DS(),
                             callbacks=[receipt_callback(seq_len=8, receipts=Receipts(fh))]).train()
    lines = _lines(p)
    assert lines[0]["kind"] == "header" and [x["index"] for x in lines[1:-1]] == [1, 2, 3]
    assert lines[-1]["completed"] == 3 and len(lines[-1]["extra"]["param_norms"]) == len(list(model.parameters()))
