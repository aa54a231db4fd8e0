"""The GPU benchmark's plumbing, at its --dry-run sizes (timings are never asserted)."""

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_kernels.py"


@pytest.mark.slow
def test_bench_dry_run_writes_json_and_table(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_kernels", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--dry-run", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for heading in ("Decode:", "Split-K at batch", "Extend (prefix) attention", "KV store", "Targets"):
        assert heading in printed
    (path,) = tmp_path.glob("bench_kernels_dry_*.json")
    result = json.loads(path.read_text())
    assert result["meta"]["dry_run"] and result["decode"] and result["split_k"] and result["extend"] and result["store"]
    assert all(r["max_abs_diff_vs_sdpa"] < 1e-2 for r in result["decode"])
    assert all(r["max_abs_diff_vs_ref"] < 1e-2 for r in result["extend"])


def test_peak_bandwidth_lookup():
    spec = importlib.util.spec_from_file_location("bench_kernels", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.peak_bandwidth("NVIDIA H200") == 4.8e12
    assert bench.peak_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert bench.peak_bandwidth("NVIDIA A100-SXM4-80GB") == 2.0e12
    assert bench.peak_bandwidth("NVIDIA GeForce RTX 4090") is None
