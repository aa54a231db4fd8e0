"""The prepared GPU check (bench/gpu_check.sh) in --dry-run: the same steps on a CPU in seconds
(tiny shapes, the Triton interpreter), ending in one summary file with every field."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from gpu_summary import FIELDS  # noqa: E402

STEPS = ["measure", "kernel_tests", "bench_kernels", "bench_decode", "bench_engine"]


@pytest.mark.slow
def test_gpu_check_dry_run_writes_the_summary(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("KVLAB_KERNEL_MODE", None)
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json", "work"]     # one summary file
    for section, keys in FIELDS.items():
        rows = summary[section] if isinstance(summary[section], list) else [summary[section]]
        assert rows, section
        for row in rows:
            assert set(keys) <= set(row), (section, set(keys) - set(row))
    assert summary["meta"]["dry_run"] is True
    assert [s["name"] for s in summary["steps"]] == STEPS
    assert all(s["status"] == "ok" for s in summary["steps"] if s["required"] or s["name"] == "bench_kernels")
    assert summary["kernel_tests"]["status"] == "PASS" and summary["kernel_tests"]["passed"] >= 1
    assert [(r["model"], r["dtype"]) for r in summary["decode"]] == \
        [("tiny", "float16"), ("tiny", "bfloat16"), ("smollm2-135m", "float16")]
    smollm2 = summary["decode"][2]                      # a real model's head layout: GQA group 3, head_dim 64
    assert (smollm2["heads"], smollm2["kv_heads"], smollm2["head_dim"]) == (9, 3, 64)
    for row in (summary["decode"][0], smollm2):
        assert row["status"] == "ok" and row["max_abs_diff"] < 1e-2, row
    assert [r["num_splits"] for r in summary["split_k"]["sweep"]] == [1, 2, 4]
    assert len(summary["targets"]) == 8 and all(t["status"].startswith("n/a") for t in summary["targets"])
    assert "targets:" in proc.stdout and "GPU check summary (DRY RUN" in proc.stdout
