"""The source notes' address-translation figure: block size 4, block table L0->P3, L1->P7,
L2->P1, L3->P5, L4->P9; token position 9 is logical block L2, offset 1, physical block P1.

Example:
    >>> t = notes_translation()
    >>> (t.logical_block, t.offset, t.physical_block, t.slot)
    (2, 1, 1, 5)
"""
from __future__ import annotations

from ..memory.block_table import Translation, translate

__all__ = ["NOTES_TABLE", "NOTES_BLOCK_SIZE", "notes_translation"]

NOTES_TABLE = [3, 7, 1, 5, 9]  # L0->P3, L1->P7, L2->P1, L3->P5, L4->P9
NOTES_BLOCK_SIZE = 4


def notes_translation(pos: int = 9, bytes_per_token: int = 1) -> Translation:
    """The notes' figure: block size 4, table [3, 7, 1, 5, 9]; pos 9 -> L2, offset 1, P1."""
    return translate(NOTES_TABLE, pos, NOTES_BLOCK_SIZE, bytes_per_token)
