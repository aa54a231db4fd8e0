"""Lesson 11's checkers pass the solutions and name the common mistakes."""
import importlib.util
from pathlib import Path

import torch

from kvlab import check

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sol11", ROOT / "solutions" / "11_fewer_bytes.py")
sol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sol)


def test_solutions_pass():
    for name in ("streaming_keep", "quest_pick", "quantize_per_token"):
        assert getattr(check, name)(getattr(sol, name), verbose=False).passed, name


def cdiv(a, b):
    return -(-a // b)


def test_streaming_window_without_sinks_is_named():
    r = check.streaming_keep(lambda n, bs, s, w: list(range(max(0, cdiv(n, bs) - cdiv(w, bs)), cdiv(n, bs))),
                             verbose=False)
    assert not r.passed and "dropped the sink blocks" in r.summary


def test_streaming_overlap_and_floor_are_named():
    dup = lambda n, bs, s, w: list(range(min(cdiv(s, bs), cdiv(n, bs)))) + list(range(max(0, cdiv(n, bs) - cdiv(w, bs)), cdiv(n, bs)))  # noqa: E731
    assert "appears twice" in check.streaming_keep(dup, verbose=False).report()
    floor = lambda n, bs, s, w: sorted(set(range(min(s // bs, cdiv(n, bs)))) | set(range(max(0, cdiv(n, bs) - cdiv(w, bs)), cdiv(n, bs))))  # noqa: E731
    assert "round up" in check.streaming_keep(floor, verbose=False).summary


def pick_by(score):
    def pick(q, lo, hi, k):
        if k < 1:
            raise ValueError("top_k")
        s = score(q, lo, hi)
        return sorted(sorted(range(len(s)), key=lambda b: (-float(s[b]), b))[:k])
    return pick


def test_quest_wrong_bounds_are_named():
    r = check.quest_pick(pick_by(lambda q, lo, hi: (q * hi).sum(-1)), verbose=False)
    assert not r.passed and "q . max" in r.summary
    r = check.quest_pick(pick_by(lambda q, lo, hi: (q * (lo + hi) / 2).sum(-1)), verbose=False)
    assert not r.passed and "centre" in r.report()


def test_per_tensor_and_per_token_scales_are_named():
    def per_tensor(x):
        if x.dim() != 3:
            raise ValueError
        s = x.abs().max() / 127
        return torch.clamp(torch.floor(x / s + 0.5), -127, 127).to(torch.int8), s.expand(x.shape[:2]).clone()

    r = check.quantize_per_token(per_tensor, verbose=False)
    assert not r.passed and "one scale for the whole tensor" in r.summary

    def per_token(x):
        if x.dim() != 3:
            raise ValueError
        s = x.abs().amax((1, 2), keepdim=True) / 127
        q = torch.clamp(torch.floor(x / s + 0.5), -127, 127).to(torch.int8)
        return q, s[..., 0].expand(x.shape[:2]).clone()

    assert "across its heads" in check.quantize_per_token(per_token, verbose=False).report()

    def truncating(x):
        if x.dim() != 3:
            raise ValueError
        s = x.abs().amax(-1) / 127
        s = torch.where(s > 0, s, torch.ones_like(s))
        return (x / s[..., None]).to(torch.int8), s

    assert "truncated toward zero" in check.quantize_per_token(truncating, verbose=False).summary


def test_zero_scale_is_named_and_stub_fails_cleanly():
    def zero_scale(x):
        if x.dim() != 3:
            raise ValueError
        s = x.abs().amax(-1) / 127
        return torch.clamp(torch.floor(x / s[..., None] + 0.5), -127, 127).to(torch.int8), s

    assert "scale 1 there" in check.quantize_per_token(zero_scale, verbose=False).report()

    def stub(x):
        raise NotImplementedError

    assert check.quantize_per_token(stub, verbose=False).summary.startswith("FAIL")


def _streaming(sinks_cap=True, window_round="up", order=1):
    def keep(n, bs, s, w):
        if min(n, s) < 0 or bs < 1 or w < 1:
            raise ValueError("bad count")
        nb = cdiv(n, bs)
        sinks = range(min(cdiv(s, bs), nb) if sinks_cap else cdiv(s, bs))
        wb = cdiv(w, bs) if window_round == "up" else w // bs
        return sorted(set(sinks) | set(range(max(0, nb - wb), nb)), reverse=order < 0)
    return keep


def test_streaming_descending_uncapped_sinks_and_floor_window_are_named():
    r = check.streaming_keep(_streaming(order=-1), verbose=False)
    assert not r.passed and "descending" in r.summary and "percentage" not in r.report()
    r = check.streaming_keep(_streaming(sinks_cap=False), verbose=False)
    assert not r.passed and "past the end" in r.summary and "num_tokens were" not in r.report()
    r = check.streaming_keep(_streaming(window_round="down"), verbose=False)
    assert not r.passed and "window was rounded down" in r.summary and "window_tokens were" not in r.report()


def test_streaming_messages_do_not_hand_over_the_formula():
    from kvlab.check.l11_fewer_bytes import QUANT_MISTAKES, QUEST_MISTAKES, STREAMING_MISTAKES

    for message in (*STREAMING_MISTAKES, *QUEST_MISTAKES, *QUANT_MISTAKES):
        for formula in ("ceil(window_tokens", "sort by (-bound", "amax over head_dim", "sum_d max("):
            assert formula not in message, message


def test_quest_max_over_channels_is_named():
    r = check.quest_pick(pick_by(lambda q, lo, hi: torch.maximum(q * hi, q * lo).amax(-1)), verbose=False)
    assert not r.passed and "largest channel" in r.summary and "|q|" not in r.report()


def _quant(axis=-1, half="up", check_dim=True):
    def quant(x):
        if check_dim and x.dim() != 3:
            raise ValueError("x must be 3-D")
        s = x.abs().amax(axis, keepdim=True) / 127
        s = torch.where(s > 0, s, torch.ones_like(s))
        v = torch.floor(x / s + 0.5) if half == "up" else torch.ceil(x / s - 0.5)
        return torch.clamp(v, -127, 127).to(torch.int8), s.squeeze(axis)
    return quant


def test_quant_heads_axis_half_down_and_no_dim_check_are_named():
    r = check.quantize_per_token(_quant(axis=1), verbose=False)
    assert not r.passed and "heads axis" in r.summary, r.report()
    r = check.quantize_per_token(_quant(half="down"), verbose=False)
    assert not r.passed and "halfway went down" in r.summary, r.report()
    r = check.quantize_per_token(_quant(check_dim=False), verbose=False)
    assert not r.passed and "not 3-D" in r.summary, r.report()


def test_a_pass_prints_one_line(capsys):
    assert check.streaming_keep(sol.streaming_keep).passed
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("PASS"), out


# ---- round 9's review: the reviewer's wrong answers, rejected AND named

def test_review_streaming_set_is_named():
    def as_set(n, bs, s, w):
        if n < 0 or bs < 1 or s < 0 or w < 1:
            raise ValueError("bad count")
        nb = cdiv(n, bs)
        return set(range(min(cdiv(s, bs), nb))) | set(range(max(0, nb - cdiv(w, bs)), nb))

    r = check.streaming_keep(as_set, verbose=False)
    assert not r.passed and "returned a set" in r.summary, r.summary


def test_review_quest_clamped_topk_is_rejected_for_its_tie_order():
    def by_topk(q, lo, hi, k):
        if k < 1:
            raise ValueError("top_k")
        b = torch.maximum(q * hi, q * lo).sum(-1)
        return sorted(torch.topk(b, min(k, len(b))).indices.tolist())

    r = check.quest_pick(by_topk, verbose=False)
    assert not r.passed and "EQUAL bounds" in r.summary, r.summary


def _quant_review(levels=127, low=-127, dims=(-1,)):
    def quant(x):
        if x.dim() != 3:
            raise ValueError("x must be 3-D")
        s = x.abs().amax(dims, keepdim=True) / levels
        s = torch.where(s > 0, s, torch.ones_like(s))
        xq = torch.clamp(torch.floor(x / s + 0.5), low, 127).to(torch.int8)
        return xq, s.expand(x.shape)[..., 0].clone()
    return quant


def test_review_quant_128_with_minus_128_is_named_in_the_summary():
    r = check.quantize_per_token(_quant_review(levels=128, low=-128), verbose=False)
    assert not r.passed and "-128" in r.summary and "divides by 128" in r.summary, r.summary


def test_review_quant_per_head_over_all_tokens_is_named_precisely_with_its_cost():
    r = check.quantize_per_token(_quant_review(dims=(0, 2)), verbose=False)
    assert not r.passed and "per head over ALL tokens" in r.summary and "measured on this case" in r.summary, r.summary
    r = check.quantize_per_token(_quant_review(dims=(0, 1, 2)), verbose=False)
    assert "whole tensor" in r.summary and "measured on this case" in r.summary, r.summary
