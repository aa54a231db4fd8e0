"""Input checks shared by the kernel wrappers; every failure is a ValueError naming the argument.

Why so strict: in the Triton interpreter an out-of-bounds load or store is not detected
(it silently reads or overwrites neighbouring memory), and on a GPU it is an illegal
address at best. So every index a kernel will follow -- block ids, slots, lengths -- is
checked here, on the host, before launch.

Two levels, chosen by the wrappers' ``check=`` flag:

* always (free: tensor metadata and host-side ints only): types, ranks, dtypes, devices,
  shapes, and every length the caller gave as host ints (``context_lens_cpu`` and friends);
* ``check=True`` adds what needs the tensors' values on the host: lengths given only as
  device tensors, and the block ids and slots a kernel will follow. On a GPU that is a
  device->host copy (a sync) per call, so the engine's hot path passes host lengths and
  ``check=False``, and tests leave it on.

Lengths, positions and block ids are integers: a float (``2.7``) or a bool (``True``) is
refused with its name and value; numpy integer scalars and integer tensors are accepted.

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


def check_tensor(name: str, t, ndim: int, dtypes: Sequence[torch.dtype], any_device: bool = False) -> None:
    """Type, rank, dtype and (unless any_device) device of one tensor argument."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise ValueError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; expected one of {allowed}")
    if not any_device and t.device.type != DEVICE:
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


MAX_HEAD_DIM = 256


def is_int(value) -> bool:
    """A Python or numpy integer, not a bool. Example: 3 -> True, numpy.int64(3) -> True, True -> False, 3.0 -> False."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    return type(value).__module__ == "numpy" and kind in ("i", "u") and getattr(value, "ndim", 1) == 0


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
    if not 1 <= head_dim <= MAX_HEAD_DIM:  # any size: tiles are padded to a power of two and masked
        raise ValueError(f"head_dim (k_cache.shape[3]) must be in [1, {MAX_HEAD_DIM}], got {head_dim}")
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
    """Lengths given as a 1-D int tensor (any device: a device->host copy) or a sequence of ints -> list of ints.

    Floats and bools are refused, naming the entry: ``[2.7]`` -> "prefix_lens[0] = 2.7 is not an int (float)".
    """
    if isinstance(lens, torch.Tensor):
        check_length_tensor(name, lens, n)
        return lens.tolist()
    if isinstance(lens, (str, bytes)) or not hasattr(lens, "__len__"):
        raise ValueError(f"{name} must be a 1-D int tensor or a list of ints, got {type(lens).__name__} {lens!r:.60}")
    values = list(lens)
    for i, x in enumerate(values):
        if type(x) is not int:
            if not is_int(x):
                raise ValueError(f"{name}[{i}] = {x!r} is not an int ({type(x).__name__}); lengths must be integers")
            values[i] = int(x)
    if n is not None and len(values) != n:
        raise ValueError(f"{name} has {len(values)} entries, expected {n}")
    return values


def check_length_tensor(name: str, lens, n: int | None = None) -> None:
    """A length tensor on any device: 1-D, int32/int64, n entries (metadata only, no copy)."""
    check_tensor(name, lens, 1, INDEX_DTYPES, any_device=True)
    if n is not None and lens.shape[0] != n:
        raise ValueError(f"{name} has {lens.shape[0]} entries, expected {n}")


def host_lengths(name: str, lens, lens_cpu, n: int | None, check: bool) -> tuple[list[int] | None, torch.Tensor | None]:
    """Resolve one length argument into (host list or None, device tensor or None).

    ``lens`` is a sequence of ints (host) or an int tensor; ``lens_cpu`` optionally gives the
    same values as host ints. The host list is known when either is host data, or when
    ``check`` allows the device->host copy of ``lens``; otherwise it is None (nothing copied).
    With ``check`` a tensor and its ``lens_cpu`` must agree.
    """
    if not isinstance(lens, torch.Tensor):
        if lens_cpu is not None:
            raise ValueError(f"{name}_cpu is for a tensor {name}; {name} is already host data")
        return as_length_list(name, lens, n), None
    check_length_tensor(name, lens, n)
    host = None if lens_cpu is None else as_length_list(f"{name}_cpu", lens_cpu, lens.shape[0])
    if check:
        values = lens.tolist()
        if host is not None and host != values:
            raise ValueError(f"{name}_cpu = {host} differs from {name} = {values}")
        host = values
    return host, lens


def check_lengths(name: str, lens: list[int], minimum: int, capacity: int | None = None, block_size: int = 0,
                  max_blocks: int = 0) -> None:
    """Every entry >= minimum and (if capacity is given) <= capacity = max_blocks x block_size."""
    if not lens:
        return
    low, high = min(lens), max(lens)
    if low < minimum:
        s = lens.index(low)
        what = "is negative" if minimum == 0 else f"< {minimum}"
        hint = "; a decode step needs at least one token of context" if minimum == 1 else ""
        raise ValueError(f"{name.format(s=s)} = {low} {what}{hint}")
    if capacity is not None and high > capacity:
        s = lens.index(high)
        raise ValueError(
            f"{name.format(s=s)} = {high} exceeds what block_tables holds: "
            f"{max_blocks} blocks x block_size {block_size} = {capacity} tokens"
        )


def check_table(block_tables, num_seqs: int, lens_name: str) -> None:
    """block_tables: a 2-D int tensor on the kernels' device with one row per sequence (metadata only)."""
    check_tensor("block_tables", block_tables, 2, INDEX_DTYPES)
    if block_tables.shape[0] != num_seqs:
        raise ValueError(f"block_tables has {block_tables.shape[0]} rows but {lens_name} has {num_seqs} entries")


def check_block_ids(block_tables: torch.Tensor, seq_lens: list[int], num_blocks: int, block_size: int,
                    lens_name: str) -> None:
    """Every block a sequence actually uses must be a valid physical block id (one device->host copy).

    ``lens_name`` names sequence s's length in messages, with ``{s}`` for the index,
    e.g. ``"context_lens[{s}]"``.

    Sequence s of length L uses table entries 0 .. ceil(L / block_size) - 1; entries past
    that are padding and may hold anything (vLLM pads with 0, some code with -1).
    """
    num_seqs, max_blocks = block_tables.shape
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
