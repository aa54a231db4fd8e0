"""The simulator learns bytes per token: int8 KV (with its scales) re-divides the same memory into
about twice the slots, and the batch grows with it (lesson 11 item 5; lesson 09's capacity results)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from kvlab.memory.kvspec import get_model
from kvlab.sim.cost import Budget


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlab", "simulate", *args, "--no-progress"], capture_output=True,
                          text=True, timeout=120)


def test_budget_re_divided_into_int8_slots():
    b = Budget.table1()
    q = b.with_bytes_per_token(get_model("opt-13b").with_dtype("int8").bytes_per_token, "int8")
    assert q.bytes_per_token == 2 * 40 * 40 * (128 + 4) == 422_400
    assert q.tokens == 15_728 * 819_200 // 422_400 == 30_502
    assert "int8" in q.source and b.with_bytes_per_token(b.bytes_per_token) is b
    with pytest.raises(ValueError, match="bytes_per_token must be an int >= 1, got 0"):
        b.with_bytes_per_token(0)


def batch(out: str) -> float:
    row = next(ln for ln in out.splitlines() if ln.startswith("vllm"))
    return float(row.split()[1])


def test_int8_kv_nearly_doubles_the_slots_and_grows_the_batch():
    fp16 = run("--policy", "vllm", "--num-requests", "400", "--rate", "30")   # memory-bound
    int8 = run("--policy", "vllm", "--num-requests", "400", "--rate", "30", "--kv-dtype", "int8")
    assert fp16.returncode == 0 and int8.returncode == 0, fp16.stderr + int8.stderr
    assert "15,728 token slots" in fp16.stdout and "30,502 token slots" in int8.stdout
    assert "2 x 40 x 40 x (128 x 1 + 4)" in int8.stdout
    assert batch(int8.stdout) > 1.3 * batch(fp16.stdout)


def test_bytes_per_token_flag_and_its_errors():
    r = run("--policy", "vllm", "--num-requests", "50", "--bytes-per-token", "409600")
    assert r.returncode == 0, r.stderr
    assert "31,456 token slots" in r.stdout                    # 15,728 x 819,200 B / 409,600 B
    bad = run("--policy", "vllm", "--kv-dtype", "int8", "--bytes-per-token", "100")
    assert bad.returncode == 2 and "give --kv-dtype or --bytes-per-token, not both" in bad.stderr
    bad = run("--policy", "vllm", "--bytes-per-token", "0")
    assert bad.returncode == 2 and "--bytes-per-token must be in [1," in bad.stderr
    bad = run("--policy", "vllm", "--kv-dtype", "int4")
    assert bad.returncode == 2 and "int4" in bad.stderr
