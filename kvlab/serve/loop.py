"""One thread drives the engine; HTTP handlers talk to it through a queue and per-request streams.

::

    HTTP handler (asyncio) ──submit/abort/call──▶ queue.Queue ──▶ engine thread
          ▲                                                         │ drain commands, Engine.step()
          │  Piece(index, token_ids, text, finish_reason)           │ each sample's new tokens
          └─── RequestStream (asyncio.Queue) ◀── call_soon_threadsafe ┘

The engine is touched by its thread only: ``submit`` and ``abort`` are queued commands, and
:meth:`EngineLoop.call` runs a function there between two steps (tests read ``check_integrity``
and the free count through it). After each step the thread sends every sample's new tokens
(detokenized, stop strings found, :class:`~kvlab.serve.detok.TextStream`), then a final
:class:`Done` with the usage; a request whose samples all stopped on a stop string is aborted in
the engine (its blocks cached and freed) and forgotten. ``abort(rid)`` (a client that went away)
does the same at the next step boundary.

Admission control: at most ``max_waiting`` requests may be queued and not yet admitted;
:meth:`submit` raises :class:`Overloaded` (the app answers 429) beyond that.

Mirrors vLLM v1's ``AsyncLLM`` + ``EngineCore`` split (an input queue, an output handler per
request, ``abort_request``) in one process, and SGLang's ``TokenizerManager`` (per-request
state, ``abort_request`` on disconnect).

Example:
    >>> from kvlab.compute.loader import load_bundled
    >>> model, tok = load_bundled()
    >>> loop = EngineLoop(model, tok, num_blocks=32, block_size=4)
    >>> loop.start()
    >>> pieces = loop.generate_sync(Submission(tok.encode("def hello():"), max_tokens=3, temperature=0.0))
    >>> pieces[-1].usage["completion_tokens"], loop.call(lambda eng: eng.check_integrity())
    (3, None)
    >>> loop.stop()
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..compute.engine import Engine
from ..compute.sequence import Request, SamplingParams
from ..memory.block_table import blocks_needed
from .dashboard import Dashboard, request_row
from .detok import TextStream
from .metrics import ServeMetrics, engine_snapshot
from .protocol import APIError

__all__ = ["Submission", "Piece", "Done", "Overloaded", "RequestStream", "EngineLoop"]

log = logging.getLogger("kvlab.serve")


class Overloaded(Exception):
    """The waiting queue is full (answered 429)."""


@dataclass
class Submission:
    """One request as the engine loop takes it (already checked by the app)."""

    prompt_ids: list[int]
    max_tokens: int
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: tuple[int, ...] = ()


@dataclass
class Piece:
    """New output of sample ``index``: its new token ids and text; ``finish_reason`` on its last."""

    index: int
    token_ids: list[int]
    text: str
    finish_reason: str | None = None


@dataclass
class Done:
    """The request is over: ``usage`` (OpenAI's), or ``error`` (an APIError) when it failed."""

    usage: dict | None = None
    error: APIError | None = None


class RequestStream:
    """What the engine thread sends one request, read in the HTTP handler's event loop."""

    def __init__(self, rid: str, aio_loop: asyncio.AbstractEventLoop | None) -> None:
        self.rid = rid
        self.aio_loop = aio_loop
        self.queue: asyncio.Queue | queue.Queue = asyncio.Queue() if aio_loop is not None else queue.Queue()

    def push(self, item: Piece | Done) -> None:
        if self.aio_loop is None:
            self.queue.put(item)
        elif not self.aio_loop.is_closed():
            self.aio_loop.call_soon_threadsafe(self.queue.put_nowait, item)

    async def __aiter__(self):
        while True:
            item = await self.queue.get()
            yield item
            if isinstance(item, Done):
                return


@dataclass(eq=False)
class _Active:
    """A request the engine thread serves: its stream, engine state and one TextStream per sample."""

    stream: RequestStream
    sub: Submission
    arrival: float
    texts: list[TextStream]
    state: Any = None
    sent: list[int] = field(default_factory=list)
    last_time: list[float] = field(default_factory=list)
    admitted: bool = False
    cached_tokens: int = 0


class EngineLoop:
    """The engine, its thread and the queue into it. Engine options as :class:`Engine`'s;
    ``max_waiting``: requests queued and not admitted before 429; ``check``: check every
    invariant after every step (tests)."""

    def __init__(self, model, tokenizer, *, num_blocks: int, block_size: int = 16, max_running: int = 16,
                 max_waiting: int = 256, model_name: str = "kvlab", check: bool = False, **engine_kwargs) -> None:
        self.engine = Engine(model, num_blocks, block_size, max_batch_size=max_running, check=check,
                             **engine_kwargs)
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_waiting = max_waiting
        self.metrics = ServeMetrics(model_name)
        self.dashboard = Dashboard(tokenizer)
        self.error: BaseException | None = None
        self._commands: queue.Queue = queue.Queue()
        self._active: dict[str, _Active] = {}
        self._unadmitted = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvlab-engine", daemon=True)

    # ------------------------------------------------------------------ from any thread
    @property
    def config(self):
        return self.engine.model.config

    def check(self, sub: Submission, param: str = "prompt") -> None:
        """What the engine's ``submit`` would refuse, as an APIError 400 naming the field; reads
        only the model's config and the pool's size (no engine state)."""
        try:
            Request("check", sub.prompt_ids, SamplingParams(sub.max_tokens, sub.n, sub.temperature, sub.seed,
                                                            sub.top_p, sub.stop_token_ids)).check_model(self.config)
        except (ValueError, TypeError) as e:
            over = "max_new_tokens" in str(e) or "exceeds" in str(e)
            raise APIError(400, str(e).replace("max_new_tokens", "max_tokens"), "max_tokens" if over else param,
                           "context_length_exceeded" if "context" in str(e) else None) from None
        bs, nb = self.engine.block_size, self.engine.cache_manager.num_blocks
        need = blocks_needed(len(sub.prompt_ids), bs) + sub.n * (blocks_needed(sub.max_tokens, bs) + 1)
        if need > nb:
            raise APIError(400, f"prompt ({len(sub.prompt_ids)} tokens) + n ({sub.n}) x max_tokens "
                                f"({sub.max_tokens}) needs {need} blocks of {bs} tokens, more than the pool's {nb}",
                           "max_tokens")

    def submit(self, sub: Submission, aio_loop: asyncio.AbstractEventLoop | None = None) -> RequestStream:
        """Queue ``sub``; its pieces arrive on the returned stream. Raises Overloaded when
        ``max_waiting`` requests already wait, RuntimeError when the engine thread has failed."""
        if self.error is not None or self._stopped.is_set():
            raise RuntimeError(f"the engine loop is not running ({self.error!r})")
        with self._lock:
            if self._unadmitted >= self.max_waiting:
                raise Overloaded(f"{self._unadmitted} requests are waiting (--max-waiting {self.max_waiting})")
            self._unadmitted += 1
        stream = RequestStream(f"req-{next(self._ids)}", aio_loop)
        self._commands.put(("submit", stream, sub, time.perf_counter()))
        return stream

    def abort(self, rid: str) -> None:
        """End request ``rid`` at the next step boundary (nothing if it has finished)."""
        self._commands.put(("abort", rid))

    def call(self, fn: Callable[[Engine], Any], timeout: float = 30.0) -> Any:
        """Run ``fn(engine)`` in the engine thread between two steps; its result (or exception)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(("call", fn, fut))
        return fut.result(timeout)

    def generate_sync(self, sub: Submission) -> list[Piece | Done]:
        """Every piece of one request, waiting in this thread (for scripts and doctests)."""
        stream = self.submit(sub)
        out = [stream.queue.get()]
        while not isinstance(out[-1], Done):
            out.append(stream.queue.get())
        return out

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._commands.put(("wake",))
        self._thread.join(timeout=30)

    @property
    def num_unadmitted(self) -> int:
        return self._unadmitted

    @property
    def active(self) -> dict:
        """The requests in flight, by request id (read on the engine thread only, as the dashboard does)."""
        return self._active

    # ------------------------------------------------------------------ the engine thread
    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                self._drain(block=not self._has_work())
                if self._has_work():
                    self.engine.step()
                    self.metrics.preemptions.labels(self.model_name).inc(len(self.engine.scheduler.preempted))
                    if len(self.engine.timeline) > 4096:          # a server keeps only recent steps
                        del self.engine.timeline[:-1024]
                    self.dashboard.track(self.engine, self._active)
                self._emit()
                self.dashboard.maybe_capture(self.engine, self, idle=not self._has_work())
                self.metrics.engine.values = engine_snapshot(self.engine, self._commands.qsize())
        except BaseException as e:                                # report, fail every open request
            log.exception("the engine loop failed")
            self.error = e
            for act in list(self._active.values()):
                act.stream.push(Done(error=APIError(500, f"the engine failed: {type(e).__name__}: {e}")))
            self._active.clear()

    def _has_work(self) -> bool:
        return bool(self.engine.pending) or not self.engine.scheduler.is_finished()

    def _drain(self, block: bool) -> None:
        try:
            cmd = self._commands.get(timeout=0.5) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            self._command(cmd)
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return

    def _command(self, cmd: tuple) -> None:
        kind = cmd[0]
        if kind == "submit":
            self._submit(*cmd[1:])
        elif kind == "abort":
            act = self._active.get(cmd[1])
            if act is not None and act.state is not None:
                self.engine.abort(act.stream.rid)
                for t in act.texts:
                    t.finish_reason = t.finish_reason or "abort"
        elif kind == "call":
            fn, fut = cmd[1:]
            try:
                fut.set_result(fn(self.engine))
            except BaseException as e:
                fut.set_exception(e)

    def _submit(self, stream: RequestStream, sub: Submission, arrival: float) -> None:
        decode = lambda ids: self.tokenizer.decode(ids)
        act = _Active(stream, sub, arrival, [TextStream(decode, sub.stop) for _ in range(sub.n)],
                      sent=[0] * sub.n, last_time=[0.0] * sub.n)
        try:
            act.state = self.engine.submit(sub.prompt_ids, sub.max_tokens, n=sub.n, temperature=sub.temperature,
                                           seed=sub.seed, top_p=sub.top_p, stop_token_ids=sub.stop_token_ids,
                                           rid=stream.rid)
        except (ValueError, TypeError) as e:
            with self._lock:
                self._unadmitted -= 1
            stream.push(Done(error=APIError(400, str(e))))
            return
        self._active[stream.rid] = act

    def _emit(self) -> None:
        now = time.perf_counter()
        for rid, act in list(self._active.items()):
            st = act.state
            if not act.admitted and st.metrics.admitted_step is not None:
                self._admitted(act, now)
            for i, seq in enumerate(st.seqs):
                self._emit_sample(act, i, seq, now)
            if all(t.finish_reason is not None for t in act.texts):
                if not st.done:                                   # stop strings ended every sample
                    self.engine.abort(rid)
                self._finish(act, now)

    def _admitted(self, act: _Active, now: float) -> None:
        act.admitted = True
        with self._lock:
            self._unadmitted -= 1
        st, m, L = act.state, self.metrics, self.model_name
        act.cached_tokens = st.prefill_saved
        m.prompt_tokens.labels(L).inc(len(st.prompt_ids))
        m.prefix_queries.labels(L).inc(len(st.prompt_ids))
        m.prefix_hits.labels(L).inc(act.cached_tokens)
        self.dashboard.admitted(self.engine, act.stream.rid, st.prompt_ids, act.cached_tokens)

    def _emit_sample(self, act: _Active, i: int, seq, now: float) -> None:
        text = act.texts[i]
        new = seq.output_ids[act.sent[i]:]
        if text.finish_reason is not None or (not new and seq.finish_reason is None):
            return
        act.sent[i] += len(new)
        m, L = self.metrics, self.model_name
        if new:
            m.generation_tokens.labels(L).inc(len(new))
            if act.last_time[i]:
                m.itl.labels(L).observe(now - act.last_time[i])
            elif i == 0:
                m.ttft.labels(L).observe(now - act.arrival)
            act.last_time[i] = now
        piece = text.add(new, final=seq.finish_reason is not None)
        if text.finish_reason is None:
            text.finish_reason = seq.finish_reason               # "stop" (a stop token), "length" or None
        act.stream.push(Piece(i, list(new), piece, text.finish_reason))

    def _finish(self, act: _Active, now: float) -> None:
        rid, st, m, L = act.stream.rid, act.state, self.metrics, self.model_name
        if not act.admitted:
            with self._lock:
                self._unadmitted -= 1
        m.e2e.labels(L).observe(now - act.arrival)
        m.prefill_computed.labels(L).inc(st.prefill_computed)
        for t in act.texts:
            m.success.labels(L, t.finish_reason).inc()
        completion = sum(act.sent)
        # In the dashboard's record (GET /dashboard/served) before the client has its answer: a client
        # reading the record right after its last answer finds that request there (the router view).
        row = request_row(rid, act, self.dashboard.names.get(rid, ""))
        self.dashboard.finished_request({**row, "state": "finished", "_tokens": list(st.prompt_ids) +
                                         list(st.outputs[0] if st.outputs else [])})
        act.stream.push(Done(usage={"prompt_tokens": len(st.prompt_ids), "completion_tokens": completion,
                                    "total_tokens": len(st.prompt_ids) + completion,
                                    "prompt_tokens_details": {"cached_tokens": act.cached_tokens}}))
        self.engine.forget(rid)
        del self._active[rid]
