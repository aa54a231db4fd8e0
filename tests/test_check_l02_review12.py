"""Review r12 of lesson 02: wrong answers a student review typed that were accepted, rejected without
the mistake named, or named as another mistake. Each is typed here and must be rejected with a note
that names it (the phrase beside it)."""
from __future__ import annotations

import pytest

from kvlab import check
from kvlab.check import l02_how_big
from test_check_memory import _solutions

S02 = _solutions("02_how_big")


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


def _notes(r) -> str:
    return "\n".join(f"{c.label}: {c.note}" for c in r.failures)


def _rejected_naming(checker, wrong, says: str) -> None:
    r = checker(wrong, verbose=False)
    assert not r.passed, "accepted"
    assert says in r.failures[0].note, _notes(r)


# ------------------------------------------------------------------ accepted before (1a, 1b)
def _config_unnamed_dtype(config):
    """The right sizes, but the ValueError for an unknown dtype does not say which dtype."""
    if config.get("torch_dtype", "float16") not in ("float16", "bfloat16", "float32"):
        raise ValueError("unknown dtype")
    return S02.bytes_per_token_from_config(config)


def test_unknown_dtype_error_must_name_the_dtype():
    _rejected_naming(check.bytes_per_token_from_config, _config_unnamed_dtype, "does not name")


def _zero_before_validating(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16):
    """Returns 0 for an empty pool (or no requests) before it checks the lengths, block_size, bytes_per_token."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization {utilization}")
    if not lengths or int(gpu_bytes * utilization) - weight_bytes <= 0:
        return 0
    return S02.max_concurrent(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size)


def test_max_concurrent_validates_before_answering_zero():
    _rejected_naming(check.max_concurrent, _zero_before_validating, "even when nothing fits")


# ------------------------------------------------------------------ rejected without a name before (2)
def _refuses_full_utilization(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16):
    if not 0 < utilization < 1:
        raise ValueError(f"utilization must be in (0, 1), got {utilization}")
    return S02.max_concurrent(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size)


def test_utilization_one_is_valid():
    _rejected_naming(check.max_concurrent, _refuses_full_utilization, "utilization 1 is valid")


def _refuses_negative_pool(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16):
    if int(gpu_bytes * utilization) - weight_bytes < 0:
        raise ValueError("the weights do not fit")
    return S02.max_concurrent(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size)


def test_weights_past_the_share_are_no_error():
    _rejected_naming(check.max_concurrent, _refuses_negative_pool, "not an error")


@pytest.mark.parametrize("wrong, says", [
    (lambda kv, b, t: 0 if kv < 0 else l02_how_big._requests_that_fit_ref(kv, b, t), "a negative budget is an error"),
    (lambda kv, b, t: kv // (b * t) if b >= 1 and t >= 1 else l02_how_big._requests_that_fit_ref(kv, b, t),
     "a negative budget is an error"),
])
def test_requests_that_fit_negative_budget(wrong, says):
    _rejected_naming(l02_how_big.requests_that_fit, wrong, says)


# ------------------------------------------------------------------ named as another mistake before (2)
def _heads_no_layers(l, h, d, t, budget, b=2):
    if min(l, h, d, t, b) < 1:
        raise ValueError("bad argument")
    per = 2 * d * t * b                     # layers forgotten
    ok = [g for g in range(1, h + 1) if h % g == 0 and g * per <= budget]
    if not ok:
        raise ValueError("nothing fits")
    return max(ok)


def _heads_round_up_to_divisor(l, h, d, t, budget, b=2):
    """The smallest divisor of num_heads at or above what the budget pays for (rounded up)."""
    if min(l, h, d, t, b) < 1:
        raise ValueError("bad argument")
    room = min(h, budget // (2 * l * d * t * b))
    if room < 1:
        raise ValueError("nothing fits")
    return min(g for g in range(room, h + 1) if h % g == 0)


def test_kv_heads_mistakes_named():
    for wrong, says, not_said in ((_heads_no_layers, "x layers", "x tokens"),
                                  (_heads_round_up_to_divisor, "rounded up to a divisor", "the 2 for K and V")):
        r = check.kv_heads_for_budget(wrong, verbose=False)
        assert not r.passed and says in r.failures[0].note, _notes(r)
        assert not any(not_said in c.note for c in r.failures), _notes(r)


def _config_fp32_as_8(config):
    if config.get("torch_dtype") == "float32":
        return 2 * S02.bytes_per_token_from_config(config)
    return S02.bytes_per_token_from_config(config)


def test_fp32_counted_as_8_bytes():
    r = check.bytes_per_token_from_config(_config_fp32_as_8, verbose=False)
    assert not r.passed and all("float32 is 4 bytes" in c.note for c in r.failures), _notes(r)


@pytest.mark.parametrize("factor", [(10**9, 2**30), (2**30, 10**9)])
def test_requests_that_fit_gib_gb_slip(factor):
    def wrong(kv, b, t):
        return l02_how_big._requests_that_fit_ref(int(kv * factor[0] / factor[1]), b, t)
    r = l02_how_big.requests_that_fit(wrong, verbose=False)
    assert not r.passed and "GB and GiB" in r.failures[0].note, _notes(r)
    assert not any("off by one" in c.note for c in r.failures), _notes(r)


def test_changed_config_names_the_key_before_and_after():
    def fills_in_defaults(config):
        config.setdefault("num_key_value_heads", config["num_attention_heads"])
        return S02.bytes_per_token_from_config(config)
    r = check.bytes_per_token_from_config(fills_in_defaults, verbose=False)
    note = r.failures[0].note
    assert "'num_key_value_heads' added (40)" in note and "..." not in note, note


def test_requests_that_fit_zero_budget_is_valid():
    def refuses_zero(kv, b, t):
        if kv <= 0:
            raise ValueError(f"budget {kv}")
        return l02_how_big._requests_that_fit_ref(kv, b, t)
    _rejected_naming(l02_how_big.requests_that_fit, refuses_zero, "a budget of 0 bytes is a valid budget")


# ------------------------------------------------------------------ exercise 3, a design question now (review item 4)
def _valid3(wrong):
    """A longest_context that checks its arguments as the contract asks, then computes ``wrong``."""
    def fn(kv, b, u, bs=16):
        if min(b, u, bs) < 1 or kv < 0:
            raise ValueError(f"bad argument {kv, b, u, bs}")
        return wrong(kv, b, u, bs)
    return fn


def test_longest_context_solution_passes():
    assert check.longest_context(S02.longest_context, verbose=False).passed


@pytest.mark.parametrize("wrong, says", [
    (lambda kv, b, u, bs: kv // (b * u), "not whole blocks"),
    (lambda kv, b, u, bs: kv // (b * bs) * bs // u, "not each user's share"),
    (lambda kv, b, u, bs: kv // (b * bs) // u, "counts blocks per user"),
    (lambda kv, b, u, bs: kv // (b * bs) * bs, "users ignored"),
    (lambda kv, b, u, bs: kv // (b * 16) // u * 16, "block_size ignored"),
    (lambda kv, b, u, bs: -(-(kv // (b * bs)) // u) * bs, "rounded a user's share of blocks up"),
    (lambda kv, b, u, bs: round(kv / (b * bs * u)) * bs, "nearest block"),
    (lambda kv, b, u, bs: int(kv / (b * bs) / u) * bs, "float division"),
    (lambda kv, b, u, bs: kv // u, "bytes per user"),
    (lambda kv, b, u, bs: S02.longest_context(int(kv * 10**9 / 2**30), b, u, bs), "GB and GiB mixed"),
    (lambda kv, b, u, bs: float(S02.longest_context(kv, b, u, bs)), "float"),
], ids=["no-blocks", "pool-blocks", "blocks", "users", "bs16", "ceil", "round", "float-div", "bytes", "gib", "float"])
def test_longest_context_mistakes_named(wrong, says):
    _rejected_naming(check.longest_context, _valid3(wrong), says)


@pytest.mark.parametrize("wrong, says", [
    (lambda kv, b, u, bs=16: kv // (b * bs) // u * bs, "where ValueError is due"),         # no checks at all
    (lambda kv, b, u, bs=16: 0 if kv < 0 else S02.longest_context(kv, b, u, bs), "a negative budget is an error"),
    (lambda kv, b, u, bs=16: S02.longest_context(kv, b, u, bs) if kv > 0 else int("zero"), "a promise of 0 tokens"),
], ids=["no-checks", "negative-0", "zero-refused"])
def test_longest_context_checks_named(wrong, says):
    _rejected_naming(check.longest_context, wrong, says)
