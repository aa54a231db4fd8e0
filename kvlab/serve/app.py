"""The HTTP side: OpenAI's routes (and SGLang's info routes) over an :class:`EngineLoop`.

    POST /v1/chat/completions   messages through the model's chat template (kvlab's plain
                                ``role: text`` lines for a model without one)
    POST /v1/completions        a prompt (text or token ids)
    GET  /v1/models             the one served model
    GET  /health                200 while the engine thread runs (503 after it failed)
    GET  /server_info           SGLang's: the server's settings (sglang-router reads it)
    GET  /model_info            SGLang's: the model
    GET  /metrics               Prometheus text format (``kvlab.serve.metrics``)
    GET  /dashboard             the live pool, radix tree and requests (``kvlab.serve.dashboard``);
                                ``/dashboard/events``: its state as server-sent events
    GET  /chat                  a page for a room: a message, the streamed reply, its cached tokens
                                and the requests that put them in the tree (``/chat/request/{rid}``)

Both completion routes take ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``,
``n``, ``stream`` (server-sent events, each ``data: {chunk}``, then ``data: [DONE]``;
``stream_options.include_usage`` adds a last chunk with the usage) and vLLM's
``return_token_ids`` and ``ignore_eos``. ``usage.prompt_tokens_details.cached_tokens`` is the radix tree's match at
admission. A request ends at the model's end-of-turn/EOS token or a ``stop`` string
(``finish_reason`` "stop") or at ``max_tokens`` ("length"). A client that disconnects aborts its
request: the engine caches and frees its blocks at the next step boundary.

Every refusal is OpenAI's error body (``kvlab.serve.protocol``), never a traceback, and is
decided before anything reaches the engine, so the engine's state is left as it was. With an
API key, ``/v1/*`` needs ``Authorization: Bearer KEY`` (vLLM's ``--api-key``).

Mirrors vLLM's ``vllm/entrypoints/openai/api_server.py`` (routes, ``with_cancellation``,
``--api-key``) and SGLang's ``http_server.py`` (``/server_info``, ``/model_info``).

Example (an in-process server; ``kvlab.serve.server.serve_in_thread`` binds a free port):
    >>> from kvlab.compute.loader import load_bundled
    >>> from kvlab.serve.server import serve_in_thread
    >>> model, tok = load_bundled()
    >>> srv = serve_in_thread(EngineLoop(model, tok, num_blocks=64, block_size=4, model_name="tiny"))
    >>> import httpx
    >>> r = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "def", "max_tokens": 3,
    ...                                                   "temperature": 0})
    >>> r.status_code, r.json()["usage"]["completion_tokens"]
    (200, 3)
    >>> httpx.post(srv.url + "/v1/completions", json={"prompt": "def", "max_tokens": -1}).json()["error"]["param"]
    'max_tokens'
    >>> srv.stop()
"""
from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..memory.block_table import blocks_needed
from .loop import Done, EngineLoop, Overloaded, Piece, RequestStream, Submission
from .protocol import MAX_BODY_BYTES, APIError, ChatCompletionRequest, CompletionRequest, error_body, parse_body

__all__ = ["build_app", "chat_prompt_ids", "stop_token_ids"]

STATIC = Path(__file__).parent / "static"
CHAT_SYSTEM_PROMPT = "You are the class assistant. Answer the student's question in a few short sentences."
EVENTS_INTERVAL_S = 0.1                      # the dashboard's events: at most 10 a second
EVENTS_PING_S = 2.0
COMPLETIONS_DEFAULT_MAX_TOKENS = 16          # OpenAI's default for /v1/completions
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eos|>")


def stop_token_ids(tok) -> tuple[int, ...]:
    """The ids that end a reply: the tokenizer's EOS and the usual end-of-turn tokens it has.
    Example (SmolLM2): (2, 0) for <|im_end|> and <|endoftext|>."""
    ids = [tok.eos_id] + [tok.hf.token_to_id(t) for t in _END_TOKENS]
    return tuple(dict.fromkeys(i for i in ids if i is not None))


def chat_prompt_ids(tok, messages: list[dict]) -> list[int]:
    """The prompt of a chat: the tokenizer's chat template, or (no template: the bundled model)
    one ``role: text`` line per message and ``assistant:``."""
    if tok.chat_template:
        return tok.apply_chat_template(messages, add_generation_prompt=True)
    return tok.encode("".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:")


def _openai_error(status: int, message: str, param=None, code=None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status)


async def _read_body(request: Request) -> bytes:
    """The body, refused with 413 past MAX_BODY_BYTES (by its Content-Length, or while reading)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise APIError(413, f"the body has {int(length):,} bytes, over the limit of {MAX_BODY_BYTES:,}", None,
                       "request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise APIError(413, f"the body is over the limit of {MAX_BODY_BYTES:,} bytes", None, "request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


class _Routes:
    """The route handlers of one server (one loop, one model name, one API key)."""

    def __init__(self, loop: EngineLoop, model_name: str, api_key: str | None, model_path: str,
                 stops: tuple[int, ...] | None) -> None:
        self.loop, self.model_name, self.api_key, self.model_path = loop, model_name, api_key, model_path
        self.stops = stop_token_ids(loop.tokenizer) if stops is None else tuple(stops)

    def auth(self, request: Request) -> None:
        if self.api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
            what = "no Authorization header" if not given else "a wrong API key"
            raise APIError(401, f"{what}: send 'Authorization: Bearer <key>' with the server's --api-key", None,
                           "invalid_api_key")

    def auth_key(self, request: Request, key: str | None) -> None:
        """``auth``, or the key as a query parameter (an EventSource cannot send headers)."""
        if self.api_key is None or (key is not None and secrets.compare_digest(key.encode(), self.api_key.encode())):
            return
        self.auth(request)

    def submission(self, body, prompt_ids: list[int], default_max: int | None, param: str) -> Submission:
        """The checked Submission of a parsed body (404 unknown model; 400 what the model or pool cannot serve)."""
        if body.model is not None and body.model != self.model_name:
            raise APIError(404, f"the model {body.model!r} does not exist; this server serves {self.model_name!r}",
                           "model", "model_not_found")
        max_tokens = getattr(body, "max_completion_tokens", None) or body.max_tokens or default_max
        if max_tokens is None:                 # chat: as much as the context and the pool allow
            ctx, P = self.loop.config.max_position_embeddings, len(prompt_ids)
            bs, nb = self.loop.engine.block_size, self.loop.engine.cache_manager.num_blocks
            max_tokens = max(1, min(ctx - P, ((nb - blocks_needed(P, bs)) // body.n - 1) * bs))
        seed = body.seed if body.seed is not None else secrets.randbelow(2 ** 31)
        sub = Submission(prompt_ids, max_tokens, body.n, body.temperature, body.top_p, seed, body.stop_strings(),
                         () if body.ignore_eos else self.stops)
        self.loop.check(sub, param)
        return sub

    async def start(self, request: Request, kind: str):
        """Read, check and queue one completion request; returns (body, submission, stream)."""
        self.auth(request)
        raw = await _read_body(request)
        if kind == "chat":
            body = parse_body(raw, ChatCompletionRequest)
            msgs = [{"role": m.role if m.role != "developer" else "system", "content": m.text()} for m in body.messages]
            try:
                ids = chat_prompt_ids(self.loop.tokenizer, msgs)
            except (ValueError, TypeError) as e:
                raise APIError(400, f"messages: {e}", "messages") from None
            sub = self.submission(body, ids, None, "messages")
        else:
            body = parse_body(raw, CompletionRequest)
            ids = self.loop.tokenizer.encode(body.prompt) if isinstance(body.prompt, str) else list(body.prompt)
            sub = self.submission(body, ids, COMPLETIONS_DEFAULT_MAX_TOKENS, "prompt")
        try:
            stream = self.loop.submit(sub, asyncio.get_running_loop())
        except Overloaded as e:
            raise APIError(429, f"the server is busy: {e}; retry later", None, "rate_limit_exceeded") from None
        except RuntimeError as e:
            raise APIError(503, str(e)) from None
        return body, sub, stream


def _choice(kind: str, index: int, text: str, finish: str | None, token_ids: list[int] | None, chunk: bool) -> dict:
    if kind == "chat":
        key, value = ("delta", {"content": text}) if chunk else ("message", {"role": "assistant", "content": text})
        c = {"index": index, key: value, "logprobs": None, "finish_reason": finish}
    else:
        c = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
    if token_ids is not None:
        c["token_ids"] = token_ids
    return c


def _head(kind: str, rid: str, model: str, chunk: bool) -> dict:
    obj = {"chat": ("chat.completion.chunk" if chunk else "chat.completion"), "text": "text_completion"}[kind]
    return {"id": ("chatcmpl-" if kind == "chat" else "cmpl-") + rid, "object": obj, "created": int(time.time()),
            "model": model}


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects (vLLM's ``listen_for_disconnect``: after the body, the
    next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _next(stream: RequestStream, gone: asyncio.Task) -> Piece | Done | None:
    """The stream's next item, or None when the client has gone first."""
    getter = asyncio.ensure_future(stream.queue.get())
    await asyncio.wait({getter, gone}, return_when=asyncio.FIRST_COMPLETED)
    if getter.done():
        return getter.result()
    getter.cancel()
    return None


async def _complete(routes: _Routes, request: Request, kind: str, body, sub: Submission,
                    stream: RequestStream) -> JSONResponse:
    texts, ids, finish = [""] * sub.n, [[] for _ in range(sub.n)], [None] * sub.n
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        while True:
            item = await _next(stream, gone)
            if item is None:                                 # aborted in the engine at its next step
                routes.loop.abort(stream.rid)
                return _openai_error(499, "the client closed the request")
            if isinstance(item, Done):
                break
            texts[item.index] += item.text
            ids[item.index] += item.token_ids
            finish[item.index] = item.finish_reason or finish[item.index]
    finally:
        gone.cancel()
    if item.error is not None:
        raise item.error
    out = _head(kind, stream.rid, routes.model_name, chunk=False)
    out["choices"] = [_choice(kind, i, texts[i], finish[i], ids[i] if body.return_token_ids else None, False)
                      for i in range(sub.n)]
    out["usage"] = item.usage
    if body.return_token_ids:
        out["prompt_token_ids"] = sub.prompt_ids
    return JSONResponse(out)


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def _stream_events(routes: _Routes, kind: str, body, sub: Submission,
                         stream: RequestStream) -> AsyncIterator[str]:
    """The SSE chunks of one streamed request; a client gone mid-stream aborts it (finally)."""
    head, finished = _head(kind, stream.rid, routes.model_name, chunk=True), False
    try:
        if kind == "chat":
            first = {**head, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                          "logprobs": None, "finish_reason": None} for i in range(sub.n)]}
            if body.return_token_ids:
                first["prompt_token_ids"] = sub.prompt_ids
            yield _sse(first)
        async for item in stream:
            if isinstance(item, Done):
                finished = True
                if item.error is not None:
                    yield _sse(item.error.body())
                elif body.stream_options is not None and body.stream_options.include_usage:
                    yield _sse({**head, "choices": [], "usage": item.usage})
                break
            if item.text or item.finish_reason or body.return_token_ids:
                ids = item.token_ids if body.return_token_ids else None
                yield _sse({**head, "choices": [_choice(kind, item.index, item.text, item.finish_reason, ids, True)]})
        yield "data: [DONE]\n\n"
    finally:
        if not finished:
            routes.loop.abort(stream.rid)


def _server_info(routes: _Routes) -> dict:
    eng, cfg = routes.loop.engine, routes.loop.config
    return {"model_path": routes.model_path, "served_model_name": routes.model_name,
            "tokenizer_path": routes.model_path,
            "page_size": eng.block_size, "max_total_num_tokens": eng.cache_manager.num_blocks * eng.block_size,
            "context_length": cfg.max_position_embeddings, "max_running_requests": eng.scheduler.max_batch_size,
            "max_queued_requests": routes.loop.max_waiting, "disable_radix_cache": eng.cache is None,
            "schedule_policy": eng.scheduler.order, "attention_backend": eng.attention_backend,
            "dp_size": 1, "tp_size": 1, "version": "kvlab-0.1.0", "engine": "kvlab"}


def _add_info_routes(app: FastAPI, routes: _Routes) -> None:
    cfg = routes.loop.config

    @app.get("/health")
    async def health():
        if routes.loop.error is not None:
            return _openai_error(503, f"the engine loop failed: {routes.loop.error!r}")
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models(request: Request):
        routes.auth(request)
        return {"object": "list", "data": [{"id": routes.model_name, "object": "model", "created": 0,
                                            "owned_by": "kvlab", "max_model_len": cfg.max_position_embeddings}]}

    @app.get("/server_info")
    async def server_info():
        return _server_info(routes)

    @app.get("/model_info")
    async def model_info():
        return {"model_path": routes.model_path, "tokenizer_path": routes.model_path, "is_generation": True,
                "served_model_name": routes.model_name, "preferred_sampling_params": None,
                "has_image_understanding": False, "has_audio_understanding": False, "model_type": "llama",
                "architectures": ["LlamaForCausalLM"], "max_model_len": cfg.max_position_embeddings}

    @app.get("/metrics")
    async def metrics():
        return Response(routes.loop.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")


def build_app(loop: EngineLoop, *, api_key: str | None = None, model_path: str = "",
              stop_token_ids: tuple[int, ...] | None = None) -> FastAPI:
    """The FastAPI app serving ``loop``. ``stop_token_ids``: the ids that end every reply
    (default: the tokenizer's EOS and end-of-turn tokens, :func:`stop_token_ids`)."""
    routes = _Routes(loop, loop.model_name, api_key, model_path, stop_token_ids)
    app = FastAPI(title="kvlab serve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(APIError)
    async def api_error(request: Request, e: APIError):
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        what = f"no route {request.method} {request.url.path}" if e.status_code in (404, 405) else str(e.detail)
        return _openai_error(e.status_code, what, None, "not_found" if e.status_code == 404 else None)

    @app.exception_handler(Exception)
    async def server_error(request: Request, e: Exception):
        return _openai_error(500, f"internal error: {type(e).__name__}")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await _route(routes, request, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await _route(routes, request, "text")

    _add_info_routes(app, routes)
    _add_page_routes(app, routes)
    return app


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


async def _dashboard_events(routes: _Routes, request: Request) -> AsyncIterator[str]:
    """The dashboard's state each time its version moved, checked every EVENTS_INTERVAL_S; an SSE
    comment every EVENTS_PING_S while idle (a client or a proxy sees the connection live). Ends
    when the server is stopping (``dashboard.closing``), so an open page never holds up a shutdown."""
    sent, quiet = -1, 0.0
    while not routes.loop.dashboard.closing and not await request.is_disconnected():
        state = routes.loop.dashboard.state
        if state is not None and state["version"] != sent:
            sent, quiet = state["version"], 0.0
            yield _sse(state)
        elif quiet >= EVENTS_PING_S:
            quiet = 0.0
            yield ": idle\n\n"
        await asyncio.sleep(EVENTS_INTERVAL_S)
        quiet += EVENTS_INTERVAL_S


def _add_page_routes(app: FastAPI, routes: _Routes) -> None:
    """/dashboard (its events and plotly.js, from the installed plotly: no CDN) and /chat."""
    @app.get("/dashboard")
    async def dashboard():
        return HTMLResponse((STATIC / "dashboard.html").read_text())

    @app.get("/dashboard/plotly.min.js")
    async def plotly_js():
        return FileResponse(_plotly_js(), media_type="text/javascript")

    @app.get("/dashboard/events")
    async def dashboard_events(request: Request, key: str | None = None):
        routes.auth_key(request, key)
        return StreamingResponse(_dashboard_events(routes, request), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    @app.get("/dashboard/served")
    async def dashboard_served(request: Request, key: str | None = None):
        routes.auth_key(request, key)
        return {"model": routes.model_name, "requests": list(routes.loop.dashboard.served)}   # a copy

    @app.get("/chat")
    async def chat():
        return HTMLResponse((STATIC / "chat.html").read_text())

    @app.get("/chat/config")
    async def chat_config():
        return {"needs_key": routes.api_key is not None, "system_prompt": CHAT_SYSTEM_PROMPT,
                "model": routes.model_name}

    @app.get("/chat/request/{rid}")
    async def chat_request(request: Request, rid: str):
        routes.auth(request)
        sources = routes.loop.dashboard.sources_of.get(rid)
        if sources is None:
            raise APIError(404, f"no request {rid!r} was admitted (or it is too old)", "rid", "not_found")
        return {"rid": rid, "sources": sources}


async def _route(routes: _Routes, request: Request, kind: str):
    body, sub, stream = await routes.start(request, kind)
    if getattr(body, "user", None):
        routes.loop.dashboard.names[stream.rid] = body.user[:40]
    if body.stream:
        return StreamingResponse(_stream_events(routes, kind, body, sub, stream), media_type="text/event-stream")
    return await _complete(routes, request, kind, body, sub, stream)
