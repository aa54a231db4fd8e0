"""A thin wrapper over a Hugging Face ``tokenizers`` byte-level BPE, with per-token display.

Byte-level BPE handles any Unicode text: a string is UTF-8 encoded, each byte is a base token,
and learned merges glue frequent byte runs into subwords. A rare Chinese character is three
byte tokens; a frequent one (退, 款...) is one token, and frequent phrases merge further.

Lessons show tokens one at a time, so :meth:`Tokenizer.token_text` decodes a single token for
display: leading spaces become ``␣``, newlines ``↵``, and a token that is only part of a UTF-8
character shows its bytes as ``<e9 80>``. ``decode`` of a whole list always gives the text back.

Not handled here: chat templates, special-token policies beyond ``<|bos|>``/``<|eos|>``
(a checkpoint's own tokenizer.json keeps whatever it defines), and training (see
``scripts/train_model.py``).

Mirrors nano-vllm's use of ``transformers.AutoTokenizer`` (``nanovllm/engine/llm_engine.py``);
kvlab wraps the ``tokenizers`` library directly and adds the per-token display.

Example:
    >>> tok = load_bundled_tokenizer()
    >>> ids = tok.encode("def hello():")
    >>> tok.decode(ids)
    'def hello():'
    >>> tok.decode(tok.encode("怎么申请退款"))
    '怎么申请退款'
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


from .config import CheckpointError

__all__ = ["ASSETS_MODEL_DIR", "BOS", "EOS", "Tokenizer", "load_tokenizer", "load_bundled_tokenizer"]



def _bundled_model_dir() -> Path:
    """assets/model inside the installed package (a wheel ships it as kvlab/assets/model), else the
    source checkout's assets/model next to the kvlab folder (an editable install, PYTHONPATH=.)."""
    package = Path(__file__).resolve().parents[1]
    for d in (package / "assets" / "model", package.parent / "assets" / "model"):
        if (d / "config.json").is_file():
            return d
    return package / "assets" / "model"


ASSETS_MODEL_DIR = _bundled_model_dir()
BOS, EOS = "<|bos|>", "<|eos|>"


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte <-> printable-character table, inverted: printable char -> byte value."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


_BYTE_DECODER = _byte_decoder()


@dataclass
class Tokenizer:
    """A loaded tokenizer.json. Build with :func:`load_tokenizer` or :func:`load_bundled_tokenizer`."""

    hf: "object"  # a tokenizers.Tokenizer (imported when a tokenizer is loaded)
    path: str = ""

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    @property
    def bos_id(self) -> int | None:
        return self.hf.token_to_id(BOS)

    @property
    def eos_id(self) -> int | None:
        return self.hf.token_to_id(EOS)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Text -> token ids (no special tokens unless add_bos and the vocabulary has <|bos|>)."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        ids = self.hf.encode(text, add_special_tokens=False).ids
        if add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Token ids -> text. Example: decode(encode("abc")) == "abc"."""
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes one token stands for (byte-level BPE vocabularies only; else its UTF-8)."""
        piece = self.hf.id_to_token(int(token_id))
        if piece is None:
            raise ValueError(f"token id {token_id} is not in the vocabulary (size {self.vocab_size})")
        if all(ch in _BYTE_DECODER for ch in piece):
            return bytes(_BYTE_DECODER[ch] for ch in piece)
        return self.hf.decode([int(token_id)], skip_special_tokens=False).encode("utf-8")

    def token_text(self, token_id: int) -> str:
        """One token as readable text for display.

        Example: " the" -> "␣the"; "\\n" -> "↵"; the first two bytes of 退 -> "<e9 80>".
        """
        piece = self.hf.id_to_token(int(token_id))
        if piece is not None and self.hf.get_added_tokens_decoder().get(int(token_id)) is not None:
            return piece
        raw = self.token_bytes(token_id)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return "<" + " ".join(f"{b:02x}" for b in raw) + ">"
        return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")

    def tokens_text(self, ids: list[int]) -> list[str]:
        """token_text of each id. Example: tokens_text(encode("hi there")) -> ['hi', '␣there']."""
        return [self.token_text(i) for i in ids]


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Load a tokenizer.json file, or the tokenizer.json inside a folder.

    A missing, unreadable or corrupt file raises CheckpointError naming it (the tokenizers
    library's own message is kept after the file name).
    """
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise CheckpointError("no such tokenizer file", file=p)
    from tokenizers import Tokenizer as _HFTokenizer  # here, so the model and kernels import without it

    try:
        hf = _HFTokenizer.from_file(str(p))
    except Exception as e:  # the tokenizers library raises plain Exception for a corrupt file
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"is not a readable tokenizer.json ({msg})", file=p) from None
    return Tokenizer(hf, str(p))


def load_bundled_tokenizer() -> Tokenizer:
    """The tokenizer of the bundled model (assets/model/tokenizer.json)."""
    return load_tokenizer(ASSETS_MODEL_DIR)
