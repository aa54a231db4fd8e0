"""Issue 28 (round 9): lesson 05 exercise 2's wrong tile splits that the independent review of 6b9afee
typed and that came back unnamed or misnamed. Each must now be rejected with a note that names the
mistake (the phrase given beside it). Exercise 3's slips of that review: test_check_mistakes_round6."""
from __future__ import annotations

import pytest

from kvlab import check
from test_check_mistakes_round6 import _not_strict, _notes  # noqa: F401  -- the fixture, used by name


# ------------------------------------------------------------------ exercise 2: the tile split
def _blocks_of(s, e, bs):
    return list(range(s // bs, (e - 1) // bs + 1))


def _tiles(n, bs, tile):
    return [_blocks_of(s, min(s + tile, n), bs) for s in range(0, n, tile)]


def _contiguous(ts, splits):
    per = -(-len(ts) // splits)
    return [ts[i * per:(i + 1) * per] for i in range(splits)]


def _even_spread(n, bs, tile, splits):      # numpy.array_split: q or q + 1 each
    ts, out, i = _tiles(n, bs, tile), [], 0
    q, r = divmod(len(ts), splits)
    for s in range(splits):
        k = q + (s < r)
        out.append(ts[i:i + k])
        i += k
    return out


def _floor_plus_rest(n, bs, tile, splits):  # floor(num_tiles / num_splits) each, the rest to the last
    ts = _tiles(n, bs, tile)
    per = max(1, len(ts) // splits)
    return [ts[i * per:(i + 1) * per] for i in range(splits - 1)] + [ts[(splits - 1) * per:]]


def _short_alone(n, bs, tile, splits):      # a special case: a short context all in program 0
    if n >= tile * splits:
        return _contiguous(_tiles(n, bs, tile), splits)
    return [_tiles(n, bs, tile)] + [[] for _ in range(splits - 1)]


@pytest.mark.parametrize("wrong, says", [
    (_even_spread, "even spread"),
    (_floor_plus_rest, "the rest went to the last program"),
    (_short_alone, "every tile went to program 0"),
    (lambda n, bs, tile, splits: _contiguous(_tiles(n, bs, 4), splits), "tiles of 4 tokens"),
    (lambda n, bs, tile, splits: _contiguous(_tiles(n, bs, bs), splits), "tiles of one block"),
    (lambda n, bs, tile, splits: [_tiles(n, bs, tile)], "num_splits was ignored"),
])
def test_kernel_tiles_names_the_split_slips(wrong, says):
    r = check.kernel_tiles(wrong, verbose=False)
    assert not r.passed
    assert says in r.failures[0].note, _notes(r)
    assert "off-by-one" not in _notes(r), _notes(r)   # the review saw num_splits ignored named as one
