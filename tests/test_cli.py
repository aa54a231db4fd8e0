"""`python -m kvlab ...` prints the walks; bad arguments give one line and exit 2."""
from __future__ import annotations

import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlab", *args], capture_output=True, text=True, timeout=60)


def test_translate_walk():
    r = run("translate", "--block-size", "4", "--table", "3,7,1,5,9", "--pos", "9")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "pos // block_size = 9 // 4 = 2  (L2)" in out
    assert "pos % block_size = 9 % 4 = 1" in out
    assert "block_table[2] = 1  (L2 -> P1)" in out
    assert "pos 9 -> L2, offset 1 -> P1 -> slot 5" in out


def test_translate_with_model_bytes():
    r = run("translate", "--pos", "9", "--model", "llama-2-70b")
    assert r.returncode == 0, r.stderr
    assert f"byte {4 * 327680 + 327680:,}" in r.stdout


def test_size():
    r = run("size", "--model", "llama-2-70b", "--tokens", "4096")
    assert r.returncode == 0, r.stderr
    assert "2 x layers 80 x kv_heads 8 x head_dim 128 x tokens 4096 x bytes 2 = 1,342,177,280 bytes" in r.stdout
    assert "10,737,418,240 bytes" in r.stdout


def test_bad_arguments_one_line_exit_2():
    for args, needle in [
        (("translate", "--pos", "20"), "pos 20"),
        (("translate", "--pos", "-1"), "-1"),
        (("translate", "--pos", "3", "--block-size", "0"), "block_size"),
        (("translate", "--pos", "x"), "'x'"),
        (("translate", "--pos", "1", "--table", "3,a"), "3,a"),
        (("size", "--model", "nope", "--tokens", "1"), "nope"),
        (("size", "--model", "opt-13b", "--tokens", "-1"), "-1"),
        (("bogus",), "bogus"),
    ]:
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, (args, r.stderr)


def test_translate_refuses_tables_that_are_not_block_tables():
    """Issue 15 item 5: a negative block id, or one physical block named twice, used to print a slot."""
    for args, needle in [
        (("translate", "--table=-1,2", "--pos", "0"), "-1"),
        (("translate", "--table", "3,3", "--pos", "5"), "twice"),
        (("translate", "--pos", "1", "--model", ""), "''"),
        (("translate", "--pos", "1", "--model", "nope", "--bytes-per-token", "8"), "--bytes-per-token"),
    ]:
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0] and not r.stdout, (args, r.stdout, r.stderr)


def test_bare_command_says_what_to_do_on_stderr():
    r = run()
    assert r.returncode == 2 and not r.stdout
    assert "choose a command" in r.stderr and "translate" in r.stderr and "simulate" in r.stderr
