"""`python -m kvlab simulate`: the paper's four systems first, the paper's budget by default, and every
argument checked before anything is printed (issue 12 item 9, issue 15 items 4 and 9)."""
from __future__ import annotations

import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlab", "simulate", *args, "--no-progress"], capture_output=True,
                          text=True, timeout=120)


def test_all_prints_the_papers_four_systems_first_with_their_published_bars():
    r = run("--model", "opt-13b", "--gpu", "a100-40gb", "--workload", "sharegpt", "--policy", "all", "--rate", "2",
            "--num-requests", "600")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "15,728 token slots" in lines[1] and "Table 1" in lines[1] and "vllm-2023" in lines[1]
    header = lines[2].split()
    assert header[:3] == ["policy", "mean_batch", "published"] and "token_states" in header and "rounding" in header
    names = [ln.split()[0] for ln in lines[3:12]]
    assert names == ["orca-max", "orca-pow2", "orca-oracle", "vllm", "firstfit-max", "firstfit-pow2",
                     "firstfit-oracle", "pow2", "paged"]
    published = [ln.split()[2] for ln in lines[3:8]]
    assert published == ["7.00", "9.81", "13.62", "30.42", "-"]
    assert "simulated" in lines[-1]


def test_seeds_give_a_95_percent_interval():
    r = run("--policy", "firstfit-oracle", "--seeds", "2", "--num-requests", "200")
    assert r.returncode == 0, r.stderr
    assert "mean_batch_95" in r.stdout and "firstfit-oracle" in r.stdout and "seeds 0..1" in r.stdout


def test_policy_all_skips_what_cannot_hold_one_request_and_says_so():
    r = run("--tokens", "2040", "--policy", "all", "--num-requests", "20")  # no run of 2,048 slots
    assert r.returncode == 0, r.stderr
    assert "skipped: orca-max (KV budget of 2,032 token slots is smaller than one request" in r.stdout
    assert r.stdout.split("\n")[3].split()[0] == "vllm"


@pytest.mark.parametrize("args, needle", [
    (("--tokens", "1000000000000", "--policy", "paged"), "--tokens must be in [1, 67,108,864]"),
    (("--tokens", "1000000000000", "--policy", "radix", "--workload", "shared_prefix"), "67,108,864"),
    (("--kv-gb", "1000000"), "--kv-gb: a budget of 1,220,703,125 token slots is more than"),
    (("--kv-gb", "inf"), "--kv-gb must be > 0 and finite, got inf"),  # once: "must be > 0, got inf"
    (("--kv-gb", "nan"), "--kv-gb must be > 0 and finite, got nan"),
    (("--kv-gb", "-3"), "--kv-gb must be > 0"),
    (("--seed", "-1"), "--seed must be in [0,"),
    (("--seeds", "0"), "--seeds must be in [1,"),
    (("--block-size", "0"), "--block-size must be in [1, 2,048], got 0"),
    (("--rate", "nan"), "--rate must be > 0 (or inf), got nan"),
    (("--rate", "0"), "--rate must be > 0"),
    (("--num-requests", "0"), "--num-requests must be in [1,"),
    (("--num-requests", "x"), "--num-requests must be an integer, got 'x'"),
    (("--utilization", "1.5"), "--utilization must be > 0 and <= 1"),
    (("--policy", "nope"), "unknown policy 'nope'"),
    (("--model", "nope"), "nope"),
    (("--gpu", "tpu"), "tpu"),
    (("--cost", "2024"), "2024"),
    (("--tokens", "2040", "--policy", "orca-max", "--num-requests", "20"), "smaller than one request"),
    (("--tokens", "100", "--policy", "paged", "--num-requests", "10"), "smaller than one request"),
])
def test_bad_arguments_one_line_naming_the_flag_and_nothing_printed(args, needle, capsys):
    from kvlab.__main__ import main

    try:  # in process (fast); kvlab.__main__ turns argparse's and the command's errors into one line, exit 2
        code = main(["simulate", *args, "--no-progress"])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and out == "" and len(lines) == 1 and needle in lines[0], (args, out, err)


def test_a_bad_argument_from_the_shell_is_one_line_too():
    r = run("--tokens", "1000000000000", "--policy", "paged")
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "67,108,864" in r.stderr
