"""bench/requirements_scan.py: what a landscape's campaigns write back as requirements and what retrieval carries."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.experience.test_requirements import gpt13b_with_environment

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "requirements_scan.py"


def _module():
    spec = importlib.util.spec_from_file_location("requirements_scan", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_scan_counts_what_is_written_and_what_is_carried(tmp_path: Path, capsys) -> None:
    mod = _module()
    path = gpt13b_with_environment(tmp_path)
    written, carried = mod.scan(path, seeds=2, trials=30)
    (need, n), = [(r, n) for r, n in written.items() if r[0][0] == "param_gather_overlap"]
    assert need[1][0] == "distributed_optimizer" and n == 2
    assert carried["[['overlap_param_gather', True], ['use_distributed_optimizer', True]]"] == 2
    assert mod.main(["--seeds", "1", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpt13b_env: written {") and "use_distributed_optimizer" in out
