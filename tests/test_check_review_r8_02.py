"""Review r8_02 of lesson 02: a case that failed only because the learner's function changed its
input showed "expected 524288 / actual 524288" beside the diagnosis. The report now says the answer
was right and names the change instead of two lines that look the same."""
from __future__ import annotations

import re

import pytest

from kvlab import check
from kvlab.check.l02_how_big import _bytes_per_token_ref


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


def mutating_config(config):
    """The right answer, with ``head_dim`` written into the caller's config (setdefault)."""
    config.setdefault("head_dim", config["hidden_size"] // config["num_attention_heads"])
    return _bytes_per_token_ref(config)


def sorting_lengths(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16):
    """Exercise 4's answer with the caller's list sorted in place."""
    from kvlab.check.l02_how_big import _max_concurrent_ref
    out = _max_concurrent_ref(list(lengths), gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size)
    lengths.sort()
    return out


@pytest.mark.parametrize("name, fn, says", [("bytes_per_token_from_config", mutating_config, "'head_dim' added"),
                                            ("max_concurrent", sorting_lengths, "'lengths' was")])
def test_changed_input_with_right_answer_says_so(name, fn, says):
    r = getattr(check, name)(fn, verbose=False)
    assert not r.passed
    report = r.report()
    pairs = re.findall(r"\n\s+expected (.*)\n\s+actual   (.*)", report)
    assert all(want != got for want, got in pairs), report
    assert "the expected answer, but" in report and says in report, report
    assert "expected" not in r.summary.split("first failure:")[1].split("--")[0].replace("the expected answer", ""), r.summary
