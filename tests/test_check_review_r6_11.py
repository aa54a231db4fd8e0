"""The review r6_03_11 of lesson 11: four wrong designs of ``quantize_per_token`` rejected with
expected and actual only (W7 signed max, W9 the scale over the token axis, W10 an asymmetric range,
W11 halves rounded away from zero), tensors shown cut to the same prefix (two identical lines), and
one ``streaming_keep`` mistake misnamed (W9: the sinks use up the window's budget, blamed on a
hard-coded window_tokens). Each wrong answer is the reviewer's own code; it must FAIL and every
failing case must name the mistake (the words below)."""
from __future__ import annotations

import re

import pytest
import torch

from kvlab import check


def _checked(x):
    if x.dim() != 3:
        raise ValueError("3-D")


def q_signed_max(x):
    _checked(x)
    s = x.amax(dim=-1) / 127
    s = torch.where(s > 0, s, torch.ones_like(s))
    return torch.clamp(torch.floor(x / s[..., None] + 0.5), -127, 127).to(torch.int8), s


def q_over_tokens(x):
    _checked(x)
    s = x.abs().amax(dim=0) / 127                       # (H, D)
    s = torch.where(s > 0, s, torch.ones_like(s))
    xq = torch.clamp(torch.floor(x / s + 0.5), -127, 127).to(torch.int8)
    return xq, s.amax(-1).expand(x.shape[0], -1).clone()


def q_asymmetric(x):
    _checked(x)
    s = (x.amax(dim=-1) - x.amin(dim=-1)) / 254
    s = torch.where(s > 0, s, torch.ones_like(s))
    return torch.clamp(torch.floor(x / s[..., None] + 0.5), -127, 127).to(torch.int8), s


def q_half_away(x):
    _checked(x)
    s = x.abs().amax(dim=-1) / 127
    s = torch.where(s > 0, s, torch.ones_like(s))
    v = x / s[..., None]
    return torch.clamp(torch.sign(v) * torch.floor(v.abs() + 0.5), -127, 127).to(torch.int8), s


def q_one_scale_per_token(x):                           # the review's W1 (named already)
    _checked(x)
    s = x.abs().amax(dim=(1, 2)) / 127
    s = torch.where(s > 0, s, torch.ones_like(s))
    return torch.clamp(torch.floor(x / s[:, None, None] + 0.5), -127, 127).to(torch.int8), s[:, None].expand(x.shape[:2]).clone()


def q_in_place(x):                                      # the review's W6 (named already)
    _checked(x)
    s = x.abs().amax(dim=-1) / 127
    s = torch.where(s > 0, s, torch.ones_like(s))
    x.div_(s[..., None])
    return torch.clamp(torch.floor(x + 0.5), -127, 127).to(torch.int8), s


QUANT = [
    ("W7 scale from the signed max", q_signed_max, "not the largest |value|"),
    ("W9 scale over the token axis", q_over_tokens, "over the token axis"),
    ("W10 asymmetric (max - min) / 254", q_asymmetric, "asymmetric range"),
    ("W11 halves rounded away from zero", q_half_away, "-2.5 must go to -2"),
]


@pytest.mark.parametrize("mistake,fn,words", QUANT, ids=[w[0].split()[0] for w in QUANT])
def test_11_review_r6_quant_design_is_rejected_and_named(mistake, fn, words):
    r = check.quantize_per_token(fn, verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert all(words in f.note for f in r.failures), [(f.label, f.note) for f in r.failures]
    assert words in r.summary


@pytest.mark.parametrize("fn", [q_signed_max, q_over_tokens, q_asymmetric, q_half_away, q_one_scale_per_token,
                                q_in_place], ids=lambda f: f.__name__)
def test_11_review_r6_quant_report_shows_where_they_differ(fn):
    """Expected and actual are never two lines that look the same: the report shows the first
    element where they differ (its index, both values), or says that the values are right."""
    report = check.quantize_per_token(fn, verbose=False).report()
    pairs = re.findall(r"\n\s+expected (.*)\n\s+actual   (.*)", report)
    assert pairs, report
    for want, got in pairs:
        assert want != got, report
    if fn is not q_in_place:
        assert re.search(r"xq\[\d+, \d+, \d+\]|scale\[\d+, \d+\]", report), report


def s_sinks_use_window(num_tokens, block_size, sink_tokens, window_tokens):
    if num_tokens < 0 or sink_tokens < 0 or block_size < 1 or window_tokens < 1:
        raise ValueError("bad")
    nb = -(-num_tokens // block_size)
    ns = min(-(-sink_tokens // block_size), nb)
    nw = max(1, -(-window_tokens // block_size) - ns)
    return sorted(set(range(ns)) | set(range(max(0, nb - nw), nb)))


def s_sinks_use_window_tokens(num_tokens, block_size, sink_tokens, window_tokens):
    """The same slip counted in tokens: the window gets window_tokens - sink_tokens."""
    if num_tokens < 0 or sink_tokens < 0 or block_size < 1 or window_tokens < 1:
        raise ValueError("bad")
    nb = -(-num_tokens // block_size)
    ns = min(-(-sink_tokens // block_size), nb)
    nw = -(-max(0, window_tokens - sink_tokens) // block_size)
    return sorted(set(range(ns)) | set(range(max(0, nb - nw), nb)))


@pytest.mark.parametrize("fn", [s_sinks_use_window, s_sinks_use_window_tokens], ids=lambda f: f.__name__)
def test_11_review_r6_sinks_do_not_use_up_the_window(fn):
    r = check.streaming_keep(fn, verbose=False)
    assert not r.passed
    words = "the sinks do not use up the window's budget"
    assert all(words in f.note for f in r.failures), [(f.label, f.note) for f in r.failures]
    assert "hard-coded" not in r.report()


def test_11_review_r6_streaming_case_label_names_the_example_not_a_table():
    r = check.streaming_keep(lambda n, bs, s, w: [], verbose=False)
    assert "table" not in r.cases[0].label and "30 tokens" in r.cases[0].label
