"""Load and save Llama checkpoints in the Hugging Face layout, and the bundled tiny model.

A checkpoint folder holds ``config.json`` (Llama keys, read into
:class:`~kvlab.compute.config.LlamaConfig`), ``model.safetensors`` or
``model.safetensors.index.json`` with its shards, and ``tokenizer.json``. Every tensor is checked
by name and shape before any is copied: a missing, unexpected or mis-shaped tensor raises
:class:`CheckpointError` naming each one, and the model is left unchanged. Nothing is downloaded.

Mirrors nano-vllm ``nanovllm/utils/loader.py`` (``load_model``: safetensors files into the
module's parameters by name); kvlab checks every name and shape first, and keeps HF's names.

Not handled here: quantized checkpoints, ``.bin`` (pickle) weights (refused with a message),
downloading. (Issue 14 reworks this module; its behaviour is unchanged from kvlab 0.1.)

Example:
    >>> model, tok = load_bundled()
    >>> ids = torch.tensor([tok.encode("Return the list")])   # (B=1, T)
    >>> model(ids).shape[-1] == model.config.vocab_size       # logits (1, T, V)
    True
    >>> sorted(expected_shapes(model.config))[:2]
    ['model.embed_tokens.weight', 'model.layers.0.input_layernorm.weight']
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from .config import CheckpointError, LlamaConfig
from .model import Llama, rope_inv_freq
from .tokenizer import load_tokenizer

__all__ = ["ASSETS_MODEL_DIR", "CheckpointError", "expected_shapes", "load_state", "load_pretrained",
           "save_pretrained", "load_bundled"]

ASSETS_MODEL_DIR = Path(__file__).resolve().parents[2] / "assets" / "model"


def expected_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name a checkpoint for ``cfg`` must hold, with its shape (HF names)."""
    C, I, hs, nh, nkv = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, C), "model.norm.weight": (C,)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": (C,),
            p + "post_attention_layernorm.weight": (C,),
            p + "self_attn.q_proj.weight": (nh * hs, C),
            p + "self_attn.k_proj.weight": (nkv * hs, C),
            p + "self_attn.v_proj.weight": (nkv * hs, C),
            p + "self_attn.o_proj.weight": (C, nh * hs),
            p + "mlp.gate_proj.weight": (I, C),
            p + "mlp.up_proj.weight": (I, C),
            p + "mlp.down_proj.weight": (C, I),
        })
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, C)
    return out


def _read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        tensors: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            if not (folder / shard).is_file():
                raise CheckpointError(f"shard {shard} listed in {index.name} is missing from {folder}")
            tensors.update(load_file(str(folder / shard)))
        return tensors
    if single.is_file():
        return load_file(str(single))
    if list(folder.glob("*.bin")):
        raise CheckpointError(f"{folder} has only .bin (pickle) weights; convert them to safetensors")
    raise CheckpointError(f"no model.safetensors or model.safetensors.index.json in {folder}")


def load_state(model: Llama, tensors: dict[str, torch.Tensor]) -> None:
    """Copy HF-named tensors into ``model``; raise CheckpointError naming every missing,
    unexpected or mis-shaped tensor (the model is left unchanged on error)."""
    cfg = model.config
    want = expected_shapes(cfg)
    tensors = {k: v for k, v in tensors.items() if not k.endswith("rotary_emb.inv_freq")}
    if cfg.tie_word_embeddings and "lm_head.weight" in tensors:
        if not torch.equal(tensors["lm_head.weight"], tensors.get("model.embed_tokens.weight", tensors["lm_head.weight"])):
            raise CheckpointError("tie_word_embeddings=True but lm_head.weight differs from model.embed_tokens.weight")
        tensors = {k: v for k, v in tensors.items() if k != "lm_head.weight"}
    missing = sorted(set(want) - set(tensors))
    unexpected = sorted(set(tensors) - set(want))
    mismatched = sorted(f"{k}: checkpoint {tuple(tensors[k].shape)} vs config {want[k]}"
                        for k in set(want) & set(tensors) if tuple(tensors[k].shape) != want[k])
    problems = []
    if missing:
        problems.append(f"missing tensors {missing}")
    if unexpected:
        problems.append(f"unexpected tensors {unexpected}")
    if mismatched:
        problems.append(f"mismatched shapes {mismatched}")
    if problems:
        raise CheckpointError("; ".join(problems))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k in want:
            params[k].copy_(tensors[k].to(params[k].dtype))


def load_pretrained(folder: str | os.PathLike, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """Load a Llama-architecture checkpoint in the Hugging Face layout from a local folder.

    The folder holds config.json (Llama keys), model.safetensors or model.safetensors.index.json
    with its shards, and tokenizer.json. Returns (model in eval mode, kvlab.tokenizer.Tokenizer or
    None when there is no tokenizer.json). Nothing is downloaded.

    Example: model, tok = load_pretrained("~/models/SmolLM2-135M")
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"no config.json in {folder}")
    cfg = LlamaConfig.from_dict(json.loads(cfg_path.read_text()))
    tensors = _read_safetensors(folder)
    # Built on the CPU and then overwritten. (Not under `with torch.device("meta")`: after that,
    # importing Triton's interpreter breaks: "Cannot call @triton.jit'd outside of the scope of a kernel".)
    model = Llama(cfg)
    load_state(model, tensors)
    model = model.to(device=device, dtype=dtype)
    model.inv_freq = rope_inv_freq(cfg).to(device)         # keep the rotary frequencies in fp32
    model.eval()
    tok = load_tokenizer(folder) if (folder / "tokenizer.json").is_file() else None
    return model, tok


def save_pretrained(model: Llama, folder: str | os.PathLike, tokenizer=None, dtype: torch.dtype | None = None) -> None:
    """Write config.json + model.safetensors (+ tokenizer.json) in the HF layout."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    d = cfg.to_dict()
    if dtype is not None:
        d["torch_dtype"] = str(dtype).removeprefix("torch.")
    (folder / "config.json").write_text(json.dumps(d, indent=2) + "\n")
    sd = {k: v.detach().to(dtype or v.dtype).contiguous() for k, v in model.state_dict().items()
          if not (cfg.tie_word_embeddings and k == "lm_head.weight")}
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.hf.save(str(folder / "tokenizer.json"))


def load_bundled(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """The tiny model bundled in assets/model (trained by scripts/train_model.py): (model, tokenizer).

    Example:
        >>> model, tok = load_bundled()
        >>> model.config.num_attention_heads, model.config.num_key_value_heads
        (4, 2)
    """
    return load_pretrained(ASSETS_MODEL_DIR, dtype=dtype, device=device)
