"""kvlab.kernels: Triton kernels for a paged KV cache, with plain-torch references.

Import order matters: ``._mode`` runs first and decides, once, whether kernels run natively on
a CUDA GPU or in the Triton interpreter on the CPU (it sets ``TRITON_INTERPRET`` before any
``@triton.jit`` below runs). Override with ``KVLAB_KERNEL_MODE=native|interpreter``.

Kernels (each validates its inputs and raises ValueError before launch; ``check=False`` keeps
the checks that need no device->host copy, for the engine's hot path):
    paged_decode_attention  one query token per sequence over its paged context (GQA, split-K
                            chosen at run time per sequence)
    store_kvcache           write new K/V into slots (slot -1 = skip)
    extend_attention        new tokens over cached prefix + causal self (radix-cache hits)
    copy_blocks             copy-on-write block copies
    store_kvcache_quant     write new K/V into an int8/fp8 cache, one scale per token and KV head
    quantized_decode_attention / selected_decode_attention
                            decode over an int8/fp8 cache (dequantize on load), and over only
                            the selected blocks of each sequence (Quest); lesson 11
Launch plans: plan_decode / plan_extend say how a call runs (grid, rows per program, splits)
and why; ``.explain()`` prints it.
References (plain torch, same signatures): *_ref, plus naive_attention (dense, recomputed).

Example::

    import kvlab.kernels as K
    print(K.self_test())    # versions, mode, and a known-answer kernel call
"""

from . import _mode  # noqa: F401, I001  -- must run first: it decides the mode before any kernel is defined
from ._mode import DEVICE, KERNEL_MODE, kernel_mode_report, known_problems
from .block_copy import copy_blocks
from .compressed_decode import quantized_decode_attention, selected_decode_attention, store_kvcache_quant
from .extend import extend_attention
from .paged_decode import paged_decode_attention
from .plan import plan_decode, plan_extend
from .reference import (
    compressed_decode_attention_ref,
    copy_blocks_ref,
    quantize_kv_ref,
    store_kvcache_quant_ref,
    extend_attention_ref,
    naive_attention,
    paged_decode_attention_ref,
    store_kvcache_ref,
)
from .kv_store import store_kvcache

__all__ = [
    "KERNEL_MODE",
    "DEVICE",
    "kernel_mode_report",
    "known_problems",
    "self_test",
    "paged_decode_attention",
    "store_kvcache",
    "extend_attention",
    "copy_blocks",
    "store_kvcache_quant",
    "quantized_decode_attention",
    "selected_decode_attention",
    "plan_decode",
    "plan_extend",
    "paged_decode_attention_ref",
    "store_kvcache_ref",
    "extend_attention_ref",
    "copy_blocks_ref",
    "naive_attention",
    "compressed_decode_attention_ref",
    "quantize_kv_ref",
    "store_kvcache_quant_ref",
]


def self_test() -> str:
    """Run one tiny known-answer paged decode call; return a report, or raise RuntimeError.

    The case, small enough to check by hand: block_size 4, head_dim 16, one sequence of
    5 tokens whose block table is [2, 0] (positions 0-3 live in physical block 2, position 4
    in block 0). With q = e_0 and K[pos] = ln(pos + 1) * e_0 and scale 1, the scores are
    ln(1..5), so the softmax weights are (1, 2, 3, 4, 5) / 15. With V[pos] = pos in every
    dimension, out = (0*1 + 1*2 + 2*3 + 3*4 + 4*5) / 15 = 40 / 15 = 8/3 in every dimension.
    Every slot the sequence does not use holds 100, so a wrong table lookup shows at once.
    """
    import math

    import torch

    block_size, head_dim, table = 4, 16, [2, 0]
    k_cache = torch.full((3, block_size, 1, head_dim), 100.0, device=DEVICE)  # (num_blocks, block_size, kv_heads, head_dim)
    v_cache = torch.full((3, block_size, 1, head_dim), 100.0, device=DEVICE)
    for pos in range(5):
        block, offset = table[pos // block_size], pos % block_size
        k_cache[block, offset, 0] = 0.0
        k_cache[block, offset, 0, 0] = math.log(pos + 1)
        v_cache[block, offset, 0] = float(pos)
    q = torch.zeros((1, 1, head_dim), device=DEVICE)                         # (num_seqs, num_heads, head_dim)
    q[0, 0, 0] = 1.0
    block_tables = torch.tensor([table], dtype=torch.int32, device=DEVICE)
    context_lens = torch.tensor([5], dtype=torch.int32, device=DEVICE)
    expected = 8.0 / 3.0
    hint = (
        "Fix: use torch>=2.4, triton 3.6-3.9 (with triton 3.6 in the interpreter, numpy<2.4), and restart the "
        "Python kernel after changing KVLAB_KERNEL_MODE or TRITON_INTERPRET. Report: " + kernel_mode_report()
    )
    try:
        out = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale=1.0)
        ref = paged_decode_attention_ref(q, k_cache, v_cache, block_tables, context_lens, scale=1.0)
    except Exception as exc:
        raise RuntimeError(f"kvlab.kernels self-test could not run the kernel: {type(exc).__name__}: {exc}\n{hint}") from exc
    got, want_ref = out.float().cpu(), ref.float().cpu()
    if not (torch.allclose(got, torch.full_like(got, expected), atol=1e-4)
            and torch.allclose(want_ref, torch.full_like(want_ref, expected), atol=1e-4)):
        raise RuntimeError(
            f"kvlab.kernels self-test gave a wrong answer: kernel {got[0, 0, :4].tolist()}, "
            f"reference {want_ref[0, 0, :4].tolist()}, expected {expected:.6f} everywhere.\n{hint}"
        )
    return f"{kernel_mode_report()}\nself-test passed: paged decode out = {got[0, 0, 0].item():.4f} (expected 8/3 = 2.6667)"
