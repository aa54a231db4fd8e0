"""A thin wrapper over a Hugging Face ``tokenizers`` byte-level BPE, with per-token display.

Byte-level BPE handles any Unicode text: a string is UTF-8 encoded, each byte is a base token,
and learned merges glue frequent byte runs into subwords. A rare Chinese character is three
byte tokens; a frequent one (退, 款...) is one token, and frequent phrases merge further.

Lessons show tokens one at a time, so :meth:`Tokenizer.token_text` decodes a single token for
display: leading spaces become ``␣``, newlines ``↵``, and a token that is only part of a UTF-8
character shows its bytes as ``<e9 80>``. ``decode`` of a whole list always gives the text back.

Chat templates (a GGUF's ``tokenizer.chat_template``) are rendered with jinja2 in a sandbox, as
transformers renders them: :meth:`Tokenizer.render_chat` gives the text,
:meth:`Tokenizer.apply_chat_template` its ids. A template is checked when it is loaded
(:func:`check_chat_template`: compiled and tried on small chats) and every render is bounded
(:data:`MAX_RENDER_S` seconds, :data:`MAX_CHAT_CHARS` characters): whatever goes wrong is one
:class:`ChatTemplateError` naming ``tokenizer.chat_template``.

Not handled here: special-token policies beyond BOS/EOS (a checkpoint's own tokenizer.json keeps
whatever it defines), and training (see ``scripts/train_model.py``).

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

import functools
import os
from dataclasses import dataclass
from pathlib import Path


from .config import CheckpointError

__all__ = ["ASSETS_MODEL_DIR", "BOS", "EOS", "ChatTemplateError", "Tokenizer", "check_chat_template", "render_template", "bytes_to_unicode", "load_tokenizer", "load_bundled_tokenizer"]



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


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-character table (byte-level BPE spells every byte with one of these).

    Example: bytes_to_unicode()[ord(" ")] -> "Ġ"; bytes_to_unicode()[ord("a")] -> "a".
    """
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def _byte_decoder() -> dict[str, int]:
    """bytes_to_unicode inverted: printable char -> byte value."""
    return {c: b for b, c in bytes_to_unicode().items()}


_BYTE_DECODER = _byte_decoder()


@dataclass
class Tokenizer:
    """A loaded tokenizer. Build with :func:`load_tokenizer`, :func:`load_bundled_tokenizer` or
    :func:`kvlab.compute.gguf.gguf_tokenizer`.

    bos_token / eos_token: the special tokens' text (None: ``<|bos|>`` / ``<|eos|>``, the bundled
    model's); chat_template: a jinja2 chat template (a GGUF's ``tokenizer.chat_template``), used by
    :meth:`render_chat` and :meth:`apply_chat_template`.
    """

    hf: "object"  # a tokenizers.Tokenizer (imported when a tokenizer is loaded)
    path: str = ""
    bos_token: str | None = None
    eos_token: str | None = None
    chat_template: str | None = None

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    @property
    def bos_id(self) -> int | None:
        return self.hf.token_to_id(self.bos_token or BOS)

    @property
    def eos_id(self) -> int | None:
        return self.hf.token_to_id(self.eos_token or EOS)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True, **extra) -> str:
        """The chat template rendered to text (jinja2, sandboxed, as transformers renders it).

        messages: [{"role": "system" | "user" | "assistant", "content": str}, ...]. A missing
        template or a malformed message raises ValueError / TypeError naming it; any failure of
        the template itself (an error, past the size or time limit) is a ChatTemplateError.

        Example (SmolLM2): render_chat([{"role": "user", "content": "hi"}]) ->
        '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\\n<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
        """
        if not self.chat_template:
            raise ValueError(f"this tokenizer ({self.path or 'no file'}) has no chat template; use encode() for raw text")
        if not isinstance(messages, (list, tuple)) or not messages:
            raise TypeError(f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got {messages!r}")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise TypeError(f"messages[{i}] = {m!r} must be a dict with str 'role' and 'content'")
        try:
            return render_template(self.chat_template, messages=list(messages),
                                   add_generation_prompt=add_generation_prompt,
                                   bos_token=self.bos_token or "", eos_token=self.eos_token or "", **extra)
        except ChatTemplateError as e:
            raise e.with_file(self.path or None) from None

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **extra) -> list[int]:
        """Token ids of :meth:`render_chat` (special tokens such as ``<|im_start|>`` are one id each).

        Example (SmolLM2): a system + user turn -> 30 ids starting [1, 9690, 198] (<|im_start|> system ↵).
        """
        return self.encode(self.render_chat(messages, add_generation_prompt, **extra))

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


MAX_TEMPLATE_CHARS = 1 << 20      # a chat template's source (real ones: a few KB)
MAX_CHAT_CHARS = 1 << 20          # a rendered chat (a whole context of text is ~40,000 characters)
MAX_RENDER_S = 2.0                # measured seconds one render may take
TEMPLATE_FIELD = "tokenizer.chat_template"
_TRIAL_CHATS = ([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                 {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}],
                [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
                [{"role": "user", "content": "u"}])


class ChatTemplateError(CheckpointError):
    """A chat template that does not compile, refers to a name it is not given, runs past
    :data:`MAX_RENDER_S` or :data:`MAX_CHAT_CHARS`, or fails while rendering (``field`` is
    ``tokenizer.chat_template``; the message names the cause in one line)."""

    def __init__(self, message: str, *, file: str | os.PathLike | None = None, field: str | None = TEMPLATE_FIELD) -> None:
        super().__init__(message, file=file, field=field)


class _TemplateLimit(Exception):
    """Raised inside a render that ran past a limit (turned into a ChatTemplateError)."""


def _sized(x) -> int:
    return len(x) if isinstance(x, (str, bytes, list, tuple)) else 0


def _chat_environment():
    """transformers' chat-template environment (sandboxed, immutable, trim_blocks, lstrip_blocks,
    loopcontrols, ``tojson``, ``raise_exception``) whose ``*``, ``**`` and ``+`` refuse results past
    :data:`MAX_CHAT_CHARS` (``'a' * 4e9`` is refused before it is built, ``10 ** 10 ** 10`` too)."""
    import json

    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class ChatEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "+"])

        def call_binop(self, context, operator, left, right):
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 256 and \
                    isinstance(left, (int, float)) and abs(left) > 1:
                raise _TemplateLimit(f"{left!r} ** {right!r} is too large a number")
            if operator == "*":
                n, size = (right, _sized(left)) if _sized(left) else (left, _sized(right))
                if size and isinstance(n, (int, float)) and size * n > MAX_CHAT_CHARS:
                    raise _TemplateLimit(f"a repetition of {size:,} x {n:,} items is past {MAX_CHAT_CHARS:,}")
            if operator == "+" and _sized(left) + _sized(right) > MAX_CHAT_CHARS:
                raise _TemplateLimit(f"a concatenation past {MAX_CHAT_CHARS:,} items")
            return super().call_binop(context, operator, left, right)

    def raise_exception(message):
        raise ChatTemplateError(f"the chat template refused the messages: {message}")

    env = ChatEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    return env


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


@functools.lru_cache(maxsize=8)
def _compiled_template(source: str):
    """``source`` compiled (a syntax error: ChatTemplateError with its line)."""
    from jinja2 import TemplateSyntaxError

    if len(source) > MAX_TEMPLATE_CHARS:
        raise ChatTemplateError(f"the chat template is {len(source):,} characters, more than {MAX_TEMPLATE_CHARS:,}")
    try:
        return _chat_environment().from_string(source)
    except TemplateSyntaxError as e:
        raise ChatTemplateError(f"the chat template does not compile: {e.message} (line {e.lineno})") from None
    except Exception as e:  # a compile that fails another way (a nesting too deep...)
        raise ChatTemplateError(f"the chat template does not compile: {_one_line(e)}") from None


def render_template(source: str, **context) -> str:
    """``source`` rendered with ``context`` in the sandbox, within :data:`MAX_RENDER_S` seconds and
    :data:`MAX_CHAT_CHARS` characters; any failure is one ChatTemplateError (no traceback to read).

    The time limit holds inside loops that print nothing: a trace function on the template's own
    frames (and only those) checks the clock on each line.

    Example: ``render_template("{{ messages[0]['content'] }}!", messages=[{"content": "hi"}])`` -> 'hi!'
    """
    import sys
    import time

    template = _compiled_template(source)
    deadline = time.perf_counter() + MAX_RENDER_S

    def in_template(frame, event, arg):
        if time.perf_counter() > deadline:
            raise _TemplateLimit(f"rendering took more than {MAX_RENDER_S:g} s")
        return in_template

    def tracer(frame, event, arg):
        return in_template(frame, event, arg) if frame.f_code.co_filename == "<template>" else None

    parts, size, old = [], 0, sys.gettrace()
    sys.settrace(tracer)
    try:
        for chunk in template.generate(**context):
            size += len(chunk)
            if size > MAX_CHAT_CHARS:
                raise _TemplateLimit(f"the rendered chat is past {MAX_CHAT_CHARS:,} characters")
            parts.append(chunk)
    except ChatTemplateError:
        raise
    except _TemplateLimit as e:
        raise ChatTemplateError(f"the chat template ran past a limit: {e}") from None
    except Exception as e:   # SecurityError, UndefinedError, TypeError, OverflowError, RecursionError, MemoryError...
        raise ChatTemplateError(f"the chat template failed: {_one_line(e)}") from None
    finally:
        sys.settrace(old)
    return "".join(parts)


def check_chat_template(source, file: str | os.PathLike | None = None) -> str:
    """A chat template read from a checkpoint, checked at load: a str, compiled, and rendered once
    on small trial chats (so a name it uses but is not given fails here, not at the first chat).
    A template that refuses every trial chat with ``raise_exception`` is kept (its rule, not a
    fault). Returns ``source``; ChatTemplateError naming ``tokenizer.chat_template`` otherwise.

    Example: ``check_chat_template("{{ messages[0].content }}")`` -> the same string;
    ``check_chat_template("{% if %}")`` -> ChatTemplateError('the chat template does not compile: ...').
    """
    if not isinstance(source, str):
        raise ChatTemplateError(f"the chat template must be a string, got {type(source).__name__}", file=file)
    for chat in _TRIAL_CHATS:
        try:
            render_template(source, messages=chat, add_generation_prompt=True, bos_token="", eos_token="")
            return source
        except ChatTemplateError as e:
            if not e.message.startswith("the chat template refused the messages"):
                raise ChatTemplateError(e.message, file=file) from None
    return source


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
