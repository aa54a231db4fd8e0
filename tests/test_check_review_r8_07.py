"""Review r8 of lesson 07, exercise 3 (block_hash_reuse): the wrong answer ``min(k * bs, len(prompt) - 1)``
(round down to whole blocks first, then cap at len(prompt) - 1) failed 1 of 16 cases and was named
"the radix tree's token-by-token answer". It must fail more than one case and be named for what it is;
the radix tree's token-by-token answer keeps its own name."""
from kvlab import check


def _reuse(cap_last: bool = False, token_level: bool = False):
    """A student's block_hash_reuse: the leading blocks an earlier prompt shares, whole blocks only."""
    def fn(prompts, block_size):
        out, seen = [], []
        for p in prompts:
            best = 0
            for q in seen:
                n = 0
                while n < min(len(p), len(q)) and p[n] == q[n]:
                    n += 1
                best = max(best, n if token_level else min(n, len(q) // block_size * block_size))
            k = best // block_size
            if token_level:
                out.append(min(best, len(p) - 1) if p else 0)
            elif cap_last:
                out.append(min(k * block_size, len(p) - 1) if p else 0)
            else:
                out.append(min(k, (len(p) - 1) // block_size) * block_size if p else 0)
            seen.append(list(p))
        return out
    return fn


def test_reference_like_answer_passes():
    assert check.block_hash_reuse(_reuse(), verbose=False).passed


def test_capping_after_rounding_fails_several_cases_and_is_named():
    r = check.block_hash_reuse(_reuse(cap_last=True), verbose=False)
    assert not r.passed
    assert len(r.failures) >= 2, [f.label for f in r.failures]
    for f in r.failures:
        assert "cap at len(prompt) - 1 before rounding down to whole blocks" in f.note, (f.label, f.note)
        assert "token-by-token" not in f.note, f.note


def test_the_token_by_token_answer_keeps_its_name():
    r = check.block_hash_reuse(_reuse(token_level=True), verbose=False)
    assert not r.passed
    assert any("token-by-token" in f.note for f in r.failures), [f.note for f in r.failures]
    assert not any("before rounding down" in f.note for f in r.failures), [f.note for f in r.failures]


def test_prefill_compared_only_with_the_first_prompt_is_named():
    """Review r8 of 07 (W2f): comparing each prompt only with the FIRST prompt served was named
    "off by one ... (< or <=)"."""
    from kvlab.check import l07_radix as ch

    def first_only(prompts):
        out = []
        for i, p in enumerate(prompts):
            q = prompts[0] if i else []
            n = 0
            while n < min(len(p), len(q)) and p[n] == q[n]:
                n += 1
            out.append(len(p) - min(n, len(p) - 1))
        return out

    r = ch.prefill_tokens(first_only, verbose=False)
    notes = {c.note for c in r.cases if not c.passed}
    assert not r.passed and notes and all("not only the first one" in n for n in notes), notes


def test_block_hash_floats_are_named_before_the_rules():
    """Review r8 of 07 (W3f): counts returned as floats were headlined "cap at len(prompt) - 1 before
    rounding"; the float is named first now, on every failing case."""
    from kvlab.check import l07_radix as ch

    def floats(prompts, block_size):
        return [float(x) for x in ch.hashed_reuse(prompts, block_size)]

    r = ch.block_hash_reuse(floats, verbose=False)
    notes = [c.note for c in r.cases if not c.passed]
    assert not r.passed and notes and all(n.startswith("returned the float") for n in notes), notes


def test_block_hash_counting_every_cached_block_is_named_on_every_failing_case():
    """Review r9 of 07: an unchained answer that counts every cached block, even after one that is not,
    was named only at a later case (the first two showed expected beside actual)."""
    from kvlab.check import l07_radix as ch

    def every_block(prompts, block_size):
        cached, out = set(), []
        for p in prompts:
            full = len(p) // block_size * block_size
            n = sum(block_size for i in range(0, full, block_size) if tuple(p[i:i + block_size]) in cached)
            out.append(min(n, (len(p) - 1) // block_size * block_size))
            cached.update(tuple(p[i:i + block_size]) for i in range(0, full, block_size))
        return out

    r = ch.block_hash_reuse(every_block, verbose=False)
    failing = [c for c in r.cases if not c.passed]
    assert not r.passed and failing and all(c.note for c in failing), [(c.label, c.note) for c in failing]
    assert "every cached block counted" in failing[0].note, failing[0].note
