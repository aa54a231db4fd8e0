"""Input checks shared by the kernel wrappers; every failure is a ValueError naming the argument.

Why so strict: in the Triton interpreter an out-of-bounds load or store is not detected
(it silently reads or overwrites neighbouring memory), and on a GPU it is an illegal
address at best. So every index a kernel will follow -- block ids, slots, lengths -- is
checked here, on the host, before launch.

What this module does not check: values inside K/V (NaN, inf), or that two sequences do
not share a physical block (sharing is legal: that is prefix caching).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._mode import DEVICE, KERNEL_MODE

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32, torch.int64)


def is_power_of_two(n: int) -> bool:
    """Example: 16 -> True, 12 -> False, 0 -> False."""
    return n > 0 and (n & (n - 1)) == 0


def next_power_of_two(n: int) -> int:
    """Example: 1 -> 1, 3 -> 4, 16 -> 16."""
    return 1 << max(0, (n - 1).bit_length())


def check_tensor(name: str, t, ndim: int, dtypes: Sequence[torch.dtype]) -> None:
    """Type, rank, dtype and device of one tensor argument."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise ValueError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; expected one of {allowed}")
    if t.device.type != DEVICE:
        raise ValueError(
            f"{name} is on device {t.device}, but kernels run in {KERNEL_MODE} mode on {DEVICE!r}; "
            f"move it with .to({DEVICE!r})"
        )


def check_same_device(**tensors: torch.Tensor) -> None:
    items = list(tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}")


def check_power_of_two(name: str, value: int) -> None:
    if not is_power_of_two(value):
        raise ValueError(f"{name} must be a power of two (Triton tile sizes are), got {value}")


def check_attention_dtype(name: str, t: torch.Tensor) -> None:
    """bf16 arithmetic is wrong in the Triton interpreter, so refuse it there."""
    if KERNEL_MODE == "interpreter" and t.dtype == torch.bfloat16:
        raise ValueError(
            f"{name} is bfloat16, which the Triton interpreter computes wrongly; "
            "use float16 or float32 on the CPU (bf16 works in native mode on a GPU)"
        )


def check_kv_cache(k_cache, v_cache) -> tuple[int, int, int, int]:
    """Check a paged cache pair; return (num_blocks, block_size, num_kv_heads, head_dim).

    Layout: (num_blocks, block_size, num_kv_heads, head_dim); the last two dimensions must be
    contiguous (one token's K is one run of num_kv_heads * head_dim elements), so a per-layer
    view of a bigger cache is fine.
    """
    check_tensor("k_cache", k_cache, 4, FLOAT_DTYPES)
    check_tensor("v_cache", v_cache, 4, FLOAT_DTYPES)
    check_same_device(k_cache=k_cache, v_cache=v_cache)
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache shape {tuple(v_cache.shape)} differs from k_cache shape {tuple(k_cache.shape)}")
    if v_cache.dtype != k_cache.dtype:
        raise ValueError(f"v_cache dtype {v_cache.dtype} differs from k_cache dtype {k_cache.dtype}")
    if v_cache.stride() != k_cache.stride():
        raise ValueError(f"v_cache strides {v_cache.stride()} differ from k_cache strides {k_cache.stride()}")
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if num_blocks == 0 or num_kv_heads == 0:
        raise ValueError(f"k_cache must hold at least one block and one head, got shape {tuple(k_cache.shape)}")
    check_power_of_two("block_size (k_cache.shape[1])", block_size)
    check_power_of_two("head_dim (k_cache.shape[3])", head_dim)
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if c.stride(3) != 1 or c.stride(2) != head_dim:
            raise ValueError(
                f"{name} must be contiguous in its last two dimensions (heads, head_dim); got strides {c.stride()}"
            )
    return num_blocks, block_size, num_kv_heads, head_dim


def check_heads(num_heads: int, num_kv_heads: int) -> None:
    if num_heads == 0 or num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_heads={num_heads} (q.shape[1]) must be a positive multiple of num_kv_heads={num_kv_heads} "
            "(k_cache.shape[2]) for grouped-query attention"
        )


def as_length_list(name: str, lens, n: int | None = None) -> list[int]:
    """Lengths given as a 1-D int tensor (any device) or a list of ints -> list of ints."""
    if isinstance(lens, torch.Tensor):
        if lens.dim() != 1:
            raise ValueError(f"{name} must be 1-D, got shape {tuple(lens.shape)}")
        if lens.dtype not in INDEX_DTYPES:
            raise ValueError(f"{name} has dtype {lens.dtype}; expected int32 or int64")
        values = lens.tolist()
    else:
        try:
            values = [int(x) for x in lens]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a 1-D int tensor or a list of ints ({exc})") from None
    if n is not None and len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries, expected {n}")
    return values


def check_block_tables(
    block_tables: torch.Tensor, seq_lens: list[int], num_blocks: int, block_size: int, lens_name: str
) -> None:
    """Every block a sequence actually uses must be a valid physical block id.

    ``lens_name`` names sequence s's length in messages, with ``{s}`` for the index,
    e.g. ``"context_lens[{s}]"``.

    Sequence s of length L uses table entries 0 .. ceil(L / block_size) - 1; entries past
    that are padding and may hold anything (vLLM pads with 0, some code with -1).
    """
    check_tensor("block_tables", block_tables, 2, INDEX_DTYPES)
    num_seqs, max_blocks = block_tables.shape
    if len(seq_lens) != num_seqs:
        raise ValueError(
            f"block_tables has {num_seqs} rows but {lens_name.split('[')[0]} has {len(seq_lens)} entries"
        )
    capacity = max_blocks * block_size
    for s, n in enumerate(seq_lens):
        if n > capacity:
            raise ValueError(
                f"{lens_name.format(s=s)} = {n} exceeds what block_tables holds: "
                f"{max_blocks} blocks x block_size {block_size} = {capacity} tokens"
            )
    if num_seqs == 0 or max_blocks == 0:
        return
    used = torch.tensor([-(-n // block_size) for n in seq_lens], device=block_tables.device)  # (num_seqs,)
    in_use = torch.arange(max_blocks, device=block_tables.device)[None, :] < used[:, None]  # (num_seqs, max_blocks)
    bad = in_use & ((block_tables < 0) | (block_tables >= num_blocks))
    if bool(bad.any()):
        s, j = (int(x) for x in bad.nonzero()[0].tolist())
        raise ValueError(
            f"block_tables[{s}, {j}] = {int(block_tables[s, j])} is not a block id in [0, {num_blocks}) "
            f"(sequence {s} uses {int(used[s])} blocks for {lens_name.format(s=s)} = {seq_lens[s]})"
        )
