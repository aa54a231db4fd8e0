"""OpenAI's request bodies and error shape, checked once where the HTTP request arrives.

``parse_body(raw, Model)`` turns the raw bytes of a request into a checked pydantic model, or
raises :class:`APIError`, which the app answers with OpenAI's error body::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}

The statuses: 400 (malformed JSON, a value the model or the pool cannot serve, an option kvlab
does not support, and a field of the wrong type or out of its range: pydantic's check, ``param``
names the field, e.g. ``messages.0.content``; vLLM's ``validation_exception_handler`` in
``vllm/entrypoints/serve/utils/server_utils.py`` and OpenAI's API answer these 400 too, not
FastAPI's default 422), 401 (API key), 404 (unknown model or route), 413 (a body over
:data:`MAX_BODY_BYTES`), 429 (the waiting queue is full).

Mirrors vLLM's ``vllm/entrypoints/openai/protocol.py`` (``ChatCompletionRequest``,
``CompletionRequest``, ``ErrorResponse``); two of vLLM's extensions: ``return_token_ids`` (each
choice carries its ``token_ids``, the response its ``prompt_token_ids``) and ``ignore_eos`` (the
benchmarks' fixed output lengths).

Not handled here: tools, logprobs, logit_bias, penalties, images, ``echo``, ``suffix``,
``best_of`` (a request that sets one is refused with 400 naming it, never silently ignored).

Example:
    >>> parse_body(b'{"prompt": "hi", "max_tokens": 4}', CompletionRequest).max_tokens
    4
    >>> try:
    ...     parse_body(b'{"prompt": "hi", "max_tokens": "4"}', CompletionRequest)
    ... except APIError as e:
    ...     print(e.status, e.param)
    400 max_tokens
"""
from __future__ import annotations

import json
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["MAX_BODY_BYTES", "MAX_N", "MAX_STOP", "APIError", "error_body", "parse_body", "ChatMessage",
           "ChatCompletionRequest", "CompletionRequest", "StreamOptions"]

MAX_BODY_BYTES = 1 << 20      # 1 MiB, as a reverse proxy in front of vLLM would cap it
MAX_N = 8                     # samples per request
MAX_STOP = 4                  # stop strings per request (OpenAI's limit)
UNSUPPORTED = ("logprobs", "top_logprobs", "logit_bias", "tools", "functions", "tool_choice", "echo", "best_of",
               "suffix", "response_format", "presence_penalty", "frequency_penalty")
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          413: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
          503: "server_error"}


class APIError(Exception):
    """An answer other than 200: ``status``, a message naming the bad value, the field (``param``)."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        return error_body(self.status, self.message, self.param, self.code)


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error object. Example: error_body(404, "no model 'x'", "model", "model_not_found")."""
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"), "param": param,
                      "code": code}}


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Strict):
    include_usage: bool = False


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[str, list[TextPart]]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class _Sampling(_Strict):
    """The fields both endpoints share (OpenAI's names and defaults)."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = Field(None, ge=0, le=2 ** 63 - 1)
    stop: Union[str, list[str], None] = None
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool = False
    ignore_eos: bool = False          # vLLM's and SGLang's extension: only max_tokens or a stop string end it
    user: str | None = None

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stops) > MAX_STOP:
            raise APIError(400, f"stop: at most {MAX_STOP} stop strings, got {len(stops)}", "stop")
        if any(not s for s in stops):
            raise APIError(400, "stop: a stop string must not be empty", "stop")
        return stops


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)


class CompletionRequest(_Sampling):
    prompt: Union[str, list[int]]


def _param(loc: tuple) -> str:
    """pydantic's error location -> OpenAI's param: ('messages', 0, 'content', 'str') -> 'messages.0.content'."""
    parts = [str(p) for p in loc if not (isinstance(p, str) and p in ("str", "int", "list[int]", "list[str]",
                                                                      "list[TextPart]", "none"))]
    return ".".join(parts) or None


def parse_body(raw: bytes, model: type[_Strict]) -> Any:
    """Raw request bytes -> a checked ``model``, or APIError 400: malformed JSON, an unsupported
    option, or a wrong type or range (naming the field)."""
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise APIError(400, f"the body is not valid JSON: {e}", None, "invalid_json") from None
    if not isinstance(obj, dict):
        raise APIError(400, f"the body must be a JSON object, got {type(obj).__name__}", None, "invalid_json")
    for name in UNSUPPORTED:
        if obj.get(name) not in (None, False, 0, [], {}):
            raise APIError(400, f"{name} is not supported by kvlab serve (got {obj[name]!r:.40})", name)
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        param = _param(err["loc"])
        raise APIError(400, f"{param}: {err['msg']} (got {err.get('input')!r:.60})", param) from None
