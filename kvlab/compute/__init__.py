"""kvlab.compute: the model, its K/V tensors, and the engine that serves requests with them (torch).

    config.py        LlamaConfig, CheckpointError: the model's hyper-parameters (HF key names)
    model.py         Llama, RMSNorm, RoPE, the attention callback: the model, cache-agnostic
    loader.py        load_pretrained, save_pretrained, load_bundled: HF-layout checkpoints, "smollm2", GGUF
    gguf.py          load_gguf, smollm2_path: GGUF files (llama.cpp's format), the registry SmolLM2
    checkpoint_checks.py  the loader's guards: sizes and shapes against the file headers, before any allocation
    weights.py       build_model, load_state: a Llama filled with HF-named tensors (both readers end here)
    tokenizer.py     Tokenizer: byte-level BPE with per-token display
    kv_tensors.py    ContiguousKV, PagedKVPool, kernel_ops: where K and V live, which kernels run
    sequence.py      SamplingParams, Request, Sequence, RequestMetrics, RequestState
    sampler.py       sample_next: greedy or Gumbel-max with a generator per sample
    model_runner.py  ModelRunner, ForwardBatch: one forward pass over the paged pool
    scheduler.py     Scheduler: waiting/running queues, admission, preemption, n > 1 forks
    engine.py        Engine: submit / step / run (continuous batching with radix reuse)
    generate.py      generate: one prompt, three ways (naive, contiguous, paged)

The engine changes no block table and no reference count: it calls the request cycle of
``kvlab.reuse.CacheManager`` (through the Scheduler), which calls ``kvlab.memory.BlockManager``.
Imports the layers below it (memory, reuse, kernels), never the ones above (sim, viz, check).

Mirrors nano-vllm's ``nanovllm/engine/`` folder (sequence, scheduler, model_runner, llm_engine)
plus its model and sampler layers.

Example:
    >>> from kvlab.compute import Engine, generate, load_bundled
    >>> model, tok = load_bundled()
    >>> eng = Engine(model, num_blocks=32, block_size=4)
    >>> r = eng.submit(tok.encode("Return the"), max_new_tokens=5)
    >>> _ = eng.run()
    >>> r.outputs == generate(model, tok.encode("Return the"), 5).sequences
    True
"""
from __future__ import annotations

from .config import CheckpointError, LlamaConfig
from .engine import Engine, EngineReport, StepRecord
from .generate import STRATEGIES, GenerationResult, UnknownStrategyError, generate
from .sequence import ContextOverflowError, EmptyPromptError, GenerateError
from .kv_tensors import BACKENDS, ContiguousKV, PagedKVPool, kernel_ops
from .loader import load_bundled, load_pretrained, save_pretrained
from .gguf import SMOLLM2_HINT, smollm2_path
from .model import Llama
from .model_runner import ForwardBatch, ModelRunner
from .sampler import sample_next
from .scheduler import Scheduler
from .sequence import Request, RequestMetrics, RequestState, SamplingParams, Sequence, SequenceStatus
from .tokenizer import Tokenizer, load_bundled_tokenizer, load_tokenizer

__all__ = [
    "CheckpointError", "LlamaConfig", "Llama", "load_bundled", "load_pretrained", "save_pretrained",
    "smollm2_path", "SMOLLM2_HINT",
    "Tokenizer", "load_tokenizer", "load_bundled_tokenizer",
    "BACKENDS", "ContiguousKV", "PagedKVPool", "kernel_ops",
    "SamplingParams", "Request", "Sequence", "SequenceStatus", "RequestMetrics", "RequestState",
    "sample_next", "ForwardBatch", "ModelRunner", "Scheduler", "Engine", "EngineReport", "StepRecord",
    "STRATEGIES", "GenerateError", "EmptyPromptError", "ContextOverflowError", "UnknownStrategyError",
    "GenerationResult", "generate",
]
