"""Lesson 06, exercise 2: wrong answers an independent review (r1, round 11) typed, each named as itself.

The review's `lastholder` answer keeps the prompt's original partial block beside the n copies (one
block too many); it was named with the `sharepartial` mistake, whose numbers agree with it on the
first failing case. Both must get their own name.
"""
from kvlab import check
from kvlab.memory.block_table import blocks_needed


def _last_holder_kept(prompt_len, num_samples, gen_len, block_size):
    full = prompt_len // block_size
    without = num_samples * blocks_needed(prompt_len + gen_len, block_size)
    if gen_len == 0:
        return without, blocks_needed(prompt_len, block_size)
    partial = 1 if prompt_len % block_size else 0     # "the original partial block stays allocated as well"
    return without, full + partial + num_samples * (blocks_needed(prompt_len + gen_len, block_size) - full)


def _share_partial(prompt_len, num_samples, gen_len, block_size):
    without = num_samples * blocks_needed(prompt_len + gen_len, block_size)
    if gen_len == 0:
        return without, blocks_needed(prompt_len, block_size)
    return without, blocks_needed(prompt_len, block_size) + num_samples * blocks_needed(gen_len, block_size)


def test_keeping_the_partial_prompt_block_is_named_as_itself():
    r = check.sampling_blocks(_last_holder_kept, verbose=False)
    assert not r.passed
    assert "no extra block for the partial prompt block" in str(r) and "last holder" in str(r)
    assert "not its new tokens alone" not in str(r)


def test_answers_in_their_own_blocks_keep_their_name():
    r = check.sampling_blocks(_share_partial, verbose=False)
    assert not r.passed and "not its new tokens alone" in str(r)
    assert "no extra block for the partial prompt block" not in str(r)


def test_review_r5_06_prompt_and_answer_rounded_separately_without_sharing_is_named():
    """Review r5 of lesson 06 (5bfbfa0): the without-sharing count with prompt and answer rounded up to blocks
    separately was misnamed ('count blocks, not tokens', 'x // bs + 1 is not a ceiling')."""
    from kvlab import blocks_needed

    def sep_ceil(prompt_len, num_samples, gen_len, block_size):
        without = num_samples * (blocks_needed(prompt_len, block_size) + blocks_needed(gen_len, block_size))
        if gen_len == 0:
            return without, blocks_needed(prompt_len, block_size)
        full = prompt_len // block_size
        return without, full + num_samples * (blocks_needed(prompt_len + gen_len, block_size) - full)

    r = check.sampling_blocks(sep_ceil, verbose=False)
    assert not r.passed and "without sharing: prompt and answer are not in separate blocks" in r.summary, r.summary
