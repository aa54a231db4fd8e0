"""kvlab serve under load, after ``vllm bench serve`` and SGLang's ``bench_serving`` (measured).

Servers run in this process (``kvlab.serve.server.serve_in_thread``, 127.0.0.1, free ports; the
overhead part starts ``python -m kvlab serve`` apart, so the client does not share its process);
requests go through the real ``openai`` async client, streamed (``return_token_ids`` and
``ignore_eos``, as vLLM's benchmark fixes output lengths). Five parts (``--only`` picks some):

- ``workload``: multi-turn chats sharing a 300-token system prompt, lengths from
  ``kvlab.sim.workloads.multi_turn`` (its token ids, mapped into the vocabulary; each turn's
  prompt is the previous prompt + the reply actually generated + the next user turn), at a fixed
  concurrency; TTFT, TPOT, ITL (p50/p90/p99), request and output-token throughput and the cached
  fraction of prompt tokens, radix cache on vs off, beside the simulator's predicted hit rate
  for the same trace (``kvlab.sim.simulate``, policy "radix", the same pool).
- ``concurrency``: the same 8 requests at concurrency 1 and 8: output tokens/s and the ratio
  (target: >= 4x, continuous batching pays).
- ``overhead``: the engine alone (``Engine.submit`` + ``run``) vs the same requests through a
  ``python -m kvlab serve`` process at concurrency 1: time per output token (target: HTTP
  adds <= 10%).
- ``cached``: a request whose 300-token system prompt is in the tree vs the cold one: TTFT
  (target: cached <= 1/3 of cold).
- ``router``: 2 kvlab servers behind SGLang's router (``sglang-router``) on multi-turn chats
  (text, /v1/chat/completions), ``--policy cache_aware`` vs ``round_robin``: each worker's
  prefix hit rate and the prefill tokens computed in all (target: cache-aware computes fewer).
- ``dashboard``: 8 streams at concurrency 8 with no dashboard open vs with ``--viewers``
  clients reading ``/dashboard/events`` (each parses every state, as the page does), runs
  alternated ``--repeats`` times: output tokens/s, medians (target: viewers cost <= 10%), and
  the states each viewer received per second (at most 10).

Usage:
    .venv/bin/python bench/bench_serve.py                      # SmolLM2 when installed, else the bundled model
    .venv/bin/python bench/bench_serve.py --only cached router
    .venv/bin/python bench/bench_serve.py --model bundled --sessions 8

Figures are measured on this machine (say its load with them); token counts are exact.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

PARTS = ("workload", "concurrency", "overhead", "cached", "router", "dashboard")
SYSTEM_TEXT = ("You are the support assistant of an online shop that sells books, games and small electronics. "
               "Follow these rules in every answer. One: greet the customer by name when they give one. Two: "
               "answer in at most three short sentences. Three: never promise a delivery date; say that most "
               "orders ship within two working days and that the tracking link in the confirmation e-mail "
               "shows the latest status. Four: refunds are possible within thirty days of delivery for items "
               "in their original packaging; the customer starts one from the order page, under Returns. "
               "Five: a damaged item is replaced free of charge; ask for a photo of the damage and the order "
               "number. Six: invoices can be downloaded from the account page as PDF files. Seven: never ask "
               "for a password or a full card number. Eight: if a question is about something else than the "
               "shop, say politely that you can only help with orders, returns, invoices and products. Nine: "
               "gift cards cannot be exchanged for cash. Ten: when you do not know, offer to pass the question "
               "to a human colleague, who answers within one working day.")
QUESTIONS = ["Where is my order?", "How do I return a game?", "Can I get an invoice?", "My charger arrived broken.",
             "Do you sell e-readers?", "Can I pay with a gift card?", "How long does a refund take?",
             "Can I change my address?"]
FOLLOW_UPS = ["Thanks. And if it is late?", "What do I need to send?", "Is that free?", "Can a person call me?"]


# ---------------------------------------------------------------- the client
async def _stream(client, prompt_ids: list[int], max_tokens: int) -> dict:
    """One streamed completion: TTFT, the gaps between tokens, end-to-end time, tokens, cached."""
    t0 = time.perf_counter()
    stream = await client.completions.create(model=client.served, prompt=prompt_ids, max_tokens=max_tokens,
                                             temperature=0, stream=True, stream_options={"include_usage": True},
                                             extra_body={"return_token_ids": True, "ignore_eos": True})
    times, toks, usage = [], [], None
    async for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            new = c.model_extra.get("token_ids") or []
            times += [now] * len(new)
            toks += new
    e2e = time.perf_counter() - t0
    return {"ttft": times[0] - t0, "itl": list(np.diff(times)), "e2e": e2e, "tokens": toks,
            "tpot": (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else float("nan"),
            "prompt": usage.prompt_tokens, "cached": usage.prompt_tokens_details.cached_tokens}


def _client(url: str, served: str):
    import openai

    c = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    c.served = served
    return c


async def _requests(url: str, served: str, prompts: list[list[int]], max_tokens: int, concurrency: int):
    client, sem = _client(url, served), asyncio.Semaphore(concurrency)

    async def one(p):
        async with sem:
            return await _stream(client, p, max_tokens)
    t = time.perf_counter()
    out = await asyncio.gather(*(one(p) for p in prompts))
    wall = time.perf_counter() - t
    await client.close()
    return list(out), wall


async def _sessions(url: str, served: str, sessions: list[list[tuple[list[int], int]]], concurrency: int):
    """Each session's turns in order (turn t+1's prompt = turn t's prompt + its reply + the next user
    turn); ``concurrency`` sessions at once."""
    client, sem = _client(url, served), asyncio.Semaphore(concurrency)

    async def one(turns):
        async with sem:
            history, out = [], []
            for user, out_len in turns:
                prompt = history + user
                r = await _stream(client, prompt, out_len)
                out.append(r)
                history = prompt + r["tokens"]
            return out
    t = time.perf_counter()
    res = await asyncio.gather(*(one(s) for s in sessions))
    wall = time.perf_counter() - t
    await client.close()
    return [r for s in res for r in s], wall


# ---------------------------------------------------------------- figures
def _pct(xs: list[float]) -> str:
    xs = [x for x in xs if x == x]
    if not xs:
        return "n/a"
    p = np.percentile(xs, [50, 90, 99]) * 1e3
    return f"p50 {p[0]:7.1f}  p90 {p[1]:7.1f}  p99 {p[2]:7.1f} ms"


def summarize(results: list[dict], wall: float) -> dict:
    out_tok = sum(len(r["tokens"]) for r in results)
    prompt = sum(r["prompt"] for r in results)
    return {"requests": len(results), "wall_s": wall, "req_per_s": len(results) / wall, "out_tok_per_s": out_tok / wall,
            "cached_fraction": sum(r["cached"] for r in results) / prompt if prompt else 0.0,
            "ttft": [r["ttft"] for r in results], "tpot": [r["tpot"] for r in results],
            "itl": [x for r in results for x in r["itl"]], "prompt_tokens": prompt, "output_tokens": out_tok}


def print_summary(name: str, s: dict) -> None:
    print(f"  {name}: {s['requests']} requests in {s['wall_s']:.1f} s: {s['req_per_s']:.2f} req/s, "
          f"{s['out_tok_per_s']:.1f} output tok/s, cached {100 * s['cached_fraction']:.1f}% of "
          f"{s['prompt_tokens']} prompt tokens")
    for k in ("ttft", "tpot", "itl"):
        print(f"      {k.upper():4}  {_pct(s[k])}")


# ---------------------------------------------------------------- servers
def _server(model, tok, args, served: str, radix: bool = True):
    from kvlab.serve.loop import EngineLoop
    from kvlab.serve.server import serve_in_thread

    return serve_in_thread(EngineLoop(model, tok, num_blocks=args.num_blocks, block_size=args.block_size,
                                      max_running=args.max_running, model_name=served, radix=radix))


def _vocab_ids(ids, V: int) -> list[int]:
    """Synthetic trace ids mapped into the vocabulary, past the first 16 (special) ids."""
    return [16 + int(i) % (V - 16) for i in ids]


def _trace(args):
    from kvlab.sim.workloads import multi_turn

    return multi_turn(num_sessions=args.sessions, turns=args.turns, rate=1000.0, seed=0, system_len=300,
                      user_mean=args.user_mean, output_mean=args.output_mean, think_time=0.0)


def _sessions_of(trace, V: int) -> list[list[tuple[list[int], int]]]:
    """The trace's sessions as (new user tokens, output length) per turn."""
    by_session: dict[str, list] = {}
    for r in trace.requests:
        s, t = r.tag[1:].split("t")
        by_session.setdefault(s, []).append((int(t), r))
    out = []
    for turns in by_session.values():
        turns.sort(key=lambda x: x[0])
        prev_len, session = 0, []
        for _, r in turns:
            session.append((_vocab_ids(r.prompt[prev_len:], V), r.output_len))
            prev_len = r.prompt_len + r.output_len
        out.append(session)
    return out


def part_workload(model, tok, args, served) -> None:
    from kvlab.sim import simulate

    trace = _trace(args)
    sessions = _sessions_of(trace, model.config.vocab_size)
    print(f"workload: {trace.summary()}; {args.concurrency} sessions at once")
    for radix in (True, False):
        srv = _server(model, tok, args, served, radix)
        try:
            res, wall = asyncio.run(_sessions(srv.url, served, sessions, args.concurrency))
        finally:
            srv.stop()
        print_summary(f"radix {'on ' if radix else 'off'}", summarize(res, wall))
    sim = simulate(trace, "radix", capacity=args.num_blocks * args.block_size, block_size=args.block_size)
    print(f"  simulator (kvlab.sim, policy radix, the same trace and pool): predicted hit rate "
          f"{100 * sim.hit_rate:.1f}%")


def _distinct_prompts(V: int, n: int, length: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(16, V, length))) for _ in range(n)]


def part_concurrency(model, tok, args, served) -> None:
    prompts = _distinct_prompts(model.config.vocab_size, 8, 32, 1)
    srv = _server(model, tok, args, served)
    try:
        tput = {}
        for c in (1, 8):
            res, wall = asyncio.run(_requests(srv.url, served, prompts, args.max_tokens, c))
            s = summarize(res, wall)
            tput[c] = s["out_tok_per_s"]
            print_summary(f"concurrency {c}", s)
            prompts = _distinct_prompts(model.config.vocab_size, 8, 32, 2)      # no cache hits in the second run
    finally:
        srv.stop()
    print(f"concurrency: 8 streams give {tput[8] / tput[1]:.2f}x the output tokens/s of 1 (target >= 4x)")


def _serve_subprocess(name: str, args):
    """``python -m kvlab serve`` in its own process (as vLLM's benchmark runs apart from the
    server): (process, url) once /health answers."""
    import subprocess
    import urllib.request

    from kvlab.serve.router import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kvlab", "serve", "--model", name, "--port", str(port),
                             "--served-model-name", name, "--num-blocks", str(args.num_blocks),
                             "--block-size", str(args.block_size),
                             "--max-running", str(args.max_running)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"kvlab serve exited with {proc.returncode}")
            time.sleep(0.25)
    proc.kill()
    raise RuntimeError("kvlab serve did not start within 300 s")


def part_overhead(model, tok, args, served) -> None:
    """Engine alone and through the server in turns (a shared machine's load drifts), 3 pairs."""
    from kvlab.compute.engine import Engine

    V = model.config.vocab_size
    eng = Engine(model, num_blocks=args.num_blocks, block_size=args.block_size)
    proc, url = _serve_subprocess(served, args)
    alone, served_tpot = [], []
    try:
        for k in range(3):
            st = eng.submit(_distinct_prompts(V, 1, 64, 30 + k)[0], args.max_tokens)
            eng.run()
            m = st.metrics
            alone.append((m.finish_time - m.first_token_time) / (args.max_tokens - 1))
            (r,), _ = asyncio.run(_requests(url, served, _distinct_prompts(V, 1, 64, 40 + k), args.max_tokens, 1))
            served_tpot.append(r["tpot"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    e, s = statistics.median(alone), statistics.median(served_tpot)
    print(f"overhead: time per output token at concurrency 1: engine alone {1e3 * e:.1f} ms, through HTTP "
          f"({served} in its own `kvlab serve` process) {1e3 * s:.1f} ms: {100 * (s - e) / e:+.1f}% (target <= 10%); "
          f"pairs (ms) {[(round(1e3 * a), round(1e3 * b)) for a, b in zip(alone, served_tpot)]}")


def part_cached(model, tok, args, served) -> None:
    srv = _server(model, tok, args, served)
    V, cold, warm = model.config.vocab_size, [], []
    try:
        for rep in range(3):
            system = _distinct_prompts(V, 1, 300, 10 + rep)[0]
            q1, q2 = _distinct_prompts(V, 2, 20, 20 + rep)
            (a,), _ = asyncio.run(_requests(srv.url, served, [system + q1], 2, 1))
            (b,), _ = asyncio.run(_requests(srv.url, served, [system + q2], 2, 1))
            cold.append(a["ttft"])
            warm.append(b["ttft"])
            assert b["cached"] >= 300 - args.block_size, b["cached"]
    finally:
        srv.stop()
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"cached: TTFT with the 300-token system prompt cold {1e3 * c:.0f} ms, cached {1e3 * w:.0f} ms: "
          f"{w / c:.2f} of cold (target <= 0.33); {cold} / {warm}")


def _chat_sessions(n: int, turns: int) -> list[list[str]]:
    return [[QUESTIONS[s % len(QUESTIONS)]] + [FOLLOW_UPS[(s + t) % len(FOLLOW_UPS)] for t in range(turns - 1)]
            for s in range(n)]


async def _chat_run(url: str, served: str, sessions: list[list[str]], max_tokens: int, concurrency: int) -> None:
    import openai

    client, sem = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600), \
        asyncio.Semaphore(concurrency)

    async def one(turns):
        async with sem:
            msgs = [{"role": "system", "content": SYSTEM_TEXT}]
            for user in turns:
                msgs.append({"role": "user", "content": user})
                r = await client.chat.completions.create(model=served, messages=msgs, max_tokens=max_tokens,
                                                         temperature=0)
                msgs.append({"role": "assistant", "content": r.choices[0].message.content})
    await asyncio.gather(*(one(s) for s in sessions))
    await client.close()


def part_router(model, tok, args, served) -> None:
    from kvlab.serve.router import Router

    sessions = _chat_sessions(args.sessions, args.turns)
    print(f"router: {len(sessions)} chat sessions x {args.turns} turns, system prompt of "
          f"{len(tok.encode(SYSTEM_TEXT))} tokens, 2 workers, {args.concurrency} sessions at once")
    for policy in ("cache_aware", "round_robin"):
        workers = [_server(model, tok, args, served) for _ in range(2)]
        router = Router.launch([w.url for w in workers], policy=policy)
        try:
            asyncio.run(_chat_run(router.url, served, sessions, args.router_tokens, args.concurrency))
        finally:
            router.stop()
            stats = [_worker_stats(w) for w in workers]
            for w in workers:
                w.stop()
        rates = ", ".join(f"{s['requests']} requests, hit {100 * s['hits'] / max(1, s['queries']):.1f}%" for s in stats)
        print(f"  {policy:12} prefill tokens computed {sum(s['computed'] for s in stats):6d}; workers: {rates}")


def _viewer(url: str, stop: threading.Event, counts: list[int]) -> None:
    """A dashboard left open: read and parse every state until ``stop``."""
    import httpx

    try:
        with httpx.stream("GET", url + "/dashboard/events", timeout=None) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    json.loads(line[6:])
                    counts.append(1)
                if stop.is_set():                      # a state or the idle comment (2 s)
                    return
    except httpx.RemoteProtocolError:                   # the server stopped first
        return


def part_dashboard(model, tok, args, served) -> None:
    srv = _server(model, tok, args, served)
    tput: dict[int, list[float]] = {0: [], args.viewers: []}
    rates = []
    try:
        for rep in range(args.repeats):
            for viewers in (0, args.viewers):
                prompts = _distinct_prompts(model.config.vocab_size, 8, 32, 10 + 2 * rep + (viewers > 0))
                stop, counts = threading.Event(), []
                threads = [threading.Thread(target=_viewer, args=(srv.url, stop, counts), daemon=True)
                           for _ in range(viewers)]
                [t.start() for t in threads]
                time.sleep(0.3 if viewers else 0)
                res, wall = asyncio.run(_requests(srv.url, served, prompts, args.max_tokens, 8))
                stop.set()
                [t.join(timeout=5) for t in threads]                    # each leaves at its next line
                tput[viewers].append(summarize(res, wall)["out_tok_per_s"])
                if viewers:
                    rates.append(len(counts) / viewers / (wall + 0.3))
    finally:
        srv.stop()
    no, yes = float(np.median(tput[0])), float(np.median(tput[args.viewers]))
    print(f"dashboard: 8 streams, {args.max_tokens} tokens each, {args.repeats} runs each: output tok/s "
          f"{no:.1f} with no dashboard, {yes:.1f} with {args.viewers} open ({100 * (yes / no - 1):+.1f}%; "
          f"target >= -10%); each viewer got {max(rates):.1f} states/s at most (limit 10)")


def _worker_stats(srv) -> dict:
    m, L = srv.loop.metrics, srv.loop.model_name
    get = lambda c: c.labels(L)._value.get()
    done = sum(s.get() for s in (m.success.labels(L, r)._value for r in ("stop", "length")))
    return {"queries": get(m.prefix_queries), "hits": get(m.prefix_hits), "computed": int(get(m.prefill_computed)),
            "requests": int(done)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="smollm2 (default when installed), bundled, or a path")
    p.add_argument("--only", nargs="*", choices=PARTS, default=list(PARTS))
    p.add_argument("--num-blocks", type=int, default=256)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-running", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=4, help="sessions at once (workload, router)")
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--user-mean", type=int, default=40)
    p.add_argument("--output-mean", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=32, help="output tokens (concurrency, overhead)")
    p.add_argument("--router-tokens", type=int, default=8, help="reply tokens per chat turn (router)")
    p.add_argument("--viewers", type=int, default=1, help="dashboards open at once (dashboard)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each kind, alternated (dashboard)")
    args = p.parse_args(argv)
    from kvlab.compute import load_bundled, load_pretrained
    from kvlab.compute.gguf import smollm2_path

    name = args.model or ("smollm2" if smollm2_path() is not None else "bundled")
    model, tok = load_bundled() if name == "bundled" else load_pretrained(name)
    print(f"kvlab bench_serve: model {name}, {args.num_blocks} blocks of {args.block_size} tokens, up to "
          f"{args.max_running} running; torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (measured)")
    for part in PARTS:
        if part in args.only:
            t = time.perf_counter()
            globals()[f"part_{part}"](model, tok, args, name)
            print(f"  ({part}: {time.perf_counter() - t:.0f} s; load average {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
