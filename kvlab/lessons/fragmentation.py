"""The source notes' fragmentation example: [A 4096][B 2048][C 4096][free 2048], run both ways.

Each function runs the real arena and block manager and returns plain data; nothing here is
hard-coded beyond the notes' own inputs (lessons 03 and 04 show it).

Example:
    >>> ex = fragmentation_example()
    >>> ex.contiguous_free, ex.contiguous_largest_free, ex.d_fits_contiguous
    (6144, 4096, False)
"""
from __future__ import annotations

from dataclasses import dataclass

from ..memory.block_manager import BlockManager
from ..memory.block_pool import OutOfBlocks
from ..memory.contiguous import ContiguousArena, OutOfContiguousSpace

__all__ = ["FragmentationExample", "fragmentation_example"]


@dataclass(frozen=True)
class FragmentationExample:
    """The notes' [A 4096][B 2048][C 4096][free 2048] example, run both ways.

    The notes say D needs 8192 and fails although 6144 are free. Two things are mixed
    there: 8192 > 6144, so D(8192) fails under any allocator. The fragmentation part is
    that even ``d_small`` = 6144 (all the free space) fails contiguously, because the
    largest hole is 4096; paging places it. And D(8192) does fit under paging once the
    running requests hold only the tokens they have produced (``*_used``) instead of
    their reservations (on-demand growth).
    """

    capacity: int
    block_size: int
    contiguous_free: int
    contiguous_largest_free: int
    contiguous_external_fragmentation: int
    d_tokens: int
    d_fits_contiguous: bool
    d_small_tokens: int
    d_small_fits_contiguous: bool
    d_small_fits_paged: bool
    d_fits_paged_same_sizes: bool
    paged_free_blocks_same_sizes: int
    b_used: int
    c_used: int
    d_fits_paged_on_demand: bool
    paged_free_blocks_on_demand: int
    error_contiguous: str
    error_paged_same_sizes: str


def fragmentation_example(block_size: int = 16, b_used: int = 1000, c_used: int = 2500) -> FragmentationExample:
    """Run the notes' example in a 12,288-token arena and an equal paged pool.

    ``b_used`` and ``c_used``: the tokens B and C have actually produced when D arrives
    (the 2048 and 4096 are their up-front reservations). They are inputs of the scenario
    (simulated), not measurements; change them to see when D fits.
    """
    sizes = {"A": 4096, "B": 2048, "C": 4096}
    capacity, d, d_small = 12288, 8192, 6144

    arena = ContiguousArena(capacity=capacity, policy="exact", max_len=capacity)
    for rid, n in sizes.items():
        arena.admit(rid, n, final_len=n)
    arena.finish("A")
    st = arena.stats()
    try:
        arena.admit("D", d, final_len=d)
        fits_c, err_c = True, ""
    except OutOfContiguousSpace as e:
        fits_c, err_c = False, str(e)
    small_c = arena.can_admit(d_small, d_small)
    arena.check_integrity()

    def paged(used: dict[str, int], want: int) -> tuple[bool, int, str]:
        m = BlockManager(num_blocks=capacity // block_size, block_size=block_size)
        for rid, n in used.items():
            m.add_sequence(rid, n)
        m.free("A")
        free = m.allocator.num_free_blocks
        try:
            m.add_sequence("D", want)
            ok, err = True, ""
        except OutOfBlocks as e:
            ok, err = False, str(e)
        m.check_integrity()
        return ok, free, err

    fits_p, free_p, err_p = paged(sizes, d)
    small_p, _, _ = paged(sizes, d_small)
    fits_od, free_od, _ = paged({"A": sizes["A"], "B": b_used, "C": c_used}, d)
    return FragmentationExample(
        capacity=capacity,
        block_size=block_size,
        contiguous_free=st.free,
        contiguous_largest_free=st.largest_free_range,
        contiguous_external_fragmentation=st.external_fragmentation,
        d_tokens=d,
        d_fits_contiguous=fits_c,
        d_small_tokens=d_small,
        d_small_fits_contiguous=small_c,
        d_small_fits_paged=small_p,
        d_fits_paged_same_sizes=fits_p,
        paged_free_blocks_same_sizes=free_p,
        b_used=b_used,
        c_used=c_used,
        d_fits_paged_on_demand=fits_od,
        paged_free_blocks_on_demand=free_od,
        error_contiguous=err_c,
        error_paged_same_sizes=err_p,
    )
