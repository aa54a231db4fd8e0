"""The contiguous baseline and the notes' fragmentation example."""
from __future__ import annotations

import pytest

from kvlab.memory.contiguous import ContiguousArena, OutOfContiguousSpace, next_pow2
from kvlab.lessons import fragmentation_example


def test_notes_fragmentation_example():
    ex = fragmentation_example()
    # contiguous: [A 4096][B 2048][C 4096][free 2048]; A finishes
    assert (ex.contiguous_free, ex.contiguous_largest_free, ex.contiguous_external_fragmentation) == (6144, 4096, 2048)
    assert not ex.d_fits_contiguous and "8192" in ex.error_contiguous and "6144" in ex.error_contiguous
    # the notes' D (8192) is larger than all free memory: no allocator can place it ...
    assert not ex.d_fits_paged_same_sizes and "512" in ex.error_paged_same_sizes and "384" in ex.error_paged_same_sizes
    # ... the fragmentation is what stops a D of 6144: contiguous fails, paging places it
    assert not ex.d_small_fits_contiguous and ex.d_small_fits_paged
    # on-demand growth: B and C hold only what they produced, so D(8192) fits
    assert ex.d_fits_paged_on_demand
    # free blocks after A finishes: 768 - ceil(1000/16) - ceil(2500/16)
    assert ex.paged_free_blocks_on_demand == 768 - 63 - 157


def test_on_demand_threshold_is_computed_not_fixed():
    # B and C produced almost all of their reservations: then D(8192) does not fit
    assert not fragmentation_example(b_used=2048, c_used=4096).d_fits_paged_on_demand
    assert fragmentation_example(b_used=100, c_used=100).d_fits_paged_on_demand


def test_policies_reserve_as_documented():
    for policy, want in [("max", 1024), ("pow2", 128), ("exact", 300)]:
        a = ContiguousArena(capacity=4096, policy=policy, max_len=1024)
        r = a.admit("R", 100, final_len=300)
        assert r.reserved == want, policy
        a.check_integrity()


def test_growth_in_place_then_copy():
    a = ContiguousArena(capacity=64, policy="pow2", max_len=64, bytes_per_token=10)
    a.admit("A", 3)  # reserves 4 at 0
    a.admit("B", 4)  # reserves 4 at 4
    assert a.grow("A", 1) == 0  # fits the reservation
    copied = a.grow("A", 1)  # needs 8; B blocks the way: move A, copying its 4 tokens
    assert copied == 40 and a.requests["A"].start == 8 and a.moves == 1
    a.check_integrity()
    st = a.stats()
    assert st.token_states == 5 + 4 and st.bytes_copied == 40
    assert st.reserved_unused == 3 + 0
    assert st.free == 64 - 12


def test_growth_extends_in_place_when_the_next_range_is_free():
    a = ContiguousArena(capacity=64, policy="pow2", max_len=64)
    a.admit("A", 4)
    assert a.grow("A", 1) == 0 and a.requests["A"].start == 0 and a.requests["A"].reserved == 8
    assert a.moves == 0
    a.check_integrity()


def test_failed_admit_and_grow_change_nothing():
    a = ContiguousArena(capacity=16, policy="exact", max_len=16)
    a.admit("A", 8, final_len=8)
    a.admit("B", 4, final_len=4)
    before = [(r.req_id, r.start, r.reserved, r.length) for r in a.requests.values()]
    with pytest.raises(OutOfContiguousSpace, match="no contiguous range of 5 slots"):
        a.admit("C", 5, final_len=5)
    with pytest.raises(OutOfContiguousSpace):
        a.grow("A", 8)
    assert [(r.req_id, r.start, r.reserved, r.length) for r in a.requests.values()] == before
    a.check_integrity()


@pytest.mark.parametrize(
    "kwargs,match",
    [({"policy": "best"}, "unknown policy 'best'"), ({"capacity": 0}, "capacity"), ({"max_len": -1}, "max_len")],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ContiguousArena(**{"capacity": 10, **kwargs})


def test_bad_requests():
    a = ContiguousArena(capacity=10, policy="exact", max_len=10)
    with pytest.raises(ValueError, match="pass final_len"):
        a.admit("A", 3)
    with pytest.raises(ValueError, match="exceeds max_len"):
        a.admit("A", 11, final_len=11)
    with pytest.raises(KeyError, match="ghost"):
        a.finish("ghost")


def test_next_pow2():
    assert [next_pow2(n) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
    with pytest.raises(ValueError):
        next_pow2(0)


@pytest.mark.parametrize("policy", ["max", "exact", "pow2"])
@pytest.mark.parametrize("bad", [1.5, True, "2", None])
def test_sizes_must_be_ints_and_nothing_changes(policy, bad):
    """Issue 15 item 8: fractional or bool sizes used to give lengths like 4.5 that passed integrity."""
    a = ContiguousArena(64, policy, max_len=32)
    a.admit("A", 3, final_len=8 if policy == "exact" else None)
    before = (dict((k, (r.start, r.reserved, r.length)) for k, r in a.requests.items()), a.bytes_copied)
    with pytest.raises((TypeError, ValueError), match="must be|int"):
        a.grow("A", bad)
    with pytest.raises((TypeError, ValueError)):
        a.admit("B", bad, final_len=8 if policy == "exact" else None)
    if policy == "exact":
        with pytest.raises((TypeError, ValueError)):
            a.admit("C", 2, final_len=bad)
    assert (dict((k, (r.start, r.reserved, r.length)) for k, r in a.requests.items()), a.bytes_copied) == before
    a.check_integrity()


def test_numpy_sizes_are_accepted_as_ints():
    import numpy as np
    a = ContiguousArena(64, "exact", max_len=32)
    r = a.admit("A", np.int64(3), final_len=np.int32(5))
    a.grow("A", np.int64(1))
    assert (type(r.length), r.length, r.reserved) == (int, 4, 5)
    a.check_integrity()
