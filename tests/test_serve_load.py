"""A bounded load test of kvlab serve: 24 concurrent clients, mixed streaming, disconnects and
malformed requests, on a pool small enough to preempt and evict.

Checked: no server error on a valid request, every completed greedy reply equal to
``generate()`` token for token, and no leaked block: after the run ``check_integrity`` holds,
every block is free or in the tree, and evicting the (unlocked) tree frees them all.
``KVLAB_SERVE_LOAD_REQUESTS`` sets the request count (default 200).
"""
from __future__ import annotations

import asyncio
import os
import random

import pytest

from serve_utils import MODEL, bundled, chat_ids, drained, expected, start_server

import httpx  # noqa: E402
import openai  # noqa: E402

CLIENTS = 24
REQUESTS = int(os.environ.get("KVLAB_SERVE_LOAD_REQUESTS", "200"))
NUM_BLOCKS = 32
SYSTEMS = ["You write Python. ", "You answer briefly and politely. ", ""]
USERS = ["open a socket", "sort a list", "read a file", "def main():", "print the time", "x = 1"]


def _plan(rng: random.Random, i: int) -> dict:
    kind = rng.random()
    p = {"i": i, "chat": rng.random() < 0.5, "stream": rng.random() < 0.5, "max_tokens": rng.randint(1, 8),
         "system": rng.choice(SYSTEMS), "user": rng.choice(USERS), "greedy": rng.random() < 0.85,
         "malformed": kind < 0.05, "disconnect": 0.05 <= kind < 0.15}
    if p["disconnect"]:
        p["stream"], p["max_tokens"] = True, 8
    return p


def _args(p: dict) -> tuple[dict, list[int]]:
    tok = bundled()[1]
    kw = {"model": MODEL, "max_tokens": p["max_tokens"], "temperature": 0 if p["greedy"] else 0.8,
          "seed": p["i"], "extra_body": {"return_token_ids": True}}
    if p["chat"]:
        msgs = ([{"role": "system", "content": p["system"]}] if p["system"] else []) + \
               [{"role": "user", "content": p["user"]}]
        return {**kw, "messages": msgs}, chat_ids(msgs)
    text = p["system"] + p["user"]
    return {**kw, "prompt": text}, tok.encode(text)


async def _one(client: openai.AsyncOpenAI, http: httpx.AsyncClient, p: dict) -> dict:
    if p["malformed"]:
        body = b'{"prompt": ' if p["i"] % 2 else b'{"prompt": "x", "max_tokens": "many"}'
        r = await http.post("/v1/completions", content=body, headers={"content-type": "application/json"})
        return {"plan": p, "status": r.status_code}
    kw, ids = _args(p)
    api = client.chat.completions if p["chat"] else client.completions
    if not p["stream"]:
        r = await api.create(**kw)
        c = r.choices[0]
        return {"plan": p, "status": 200, "ids": ids, "tokens": c.model_extra["token_ids"], "finish": c.finish_reason}
    stream = await api.create(**kw, stream=True)
    toks, finish, chunks = [], None, 0
    async for chunk in stream:
        chunks += 1
        for c in chunk.choices:
            toks += c.model_extra.get("token_ids") or []
            finish = c.finish_reason or finish
        if p["disconnect"] and chunks >= 2:
            await stream.close()                                  # the client goes away mid-stream
            return {"plan": p, "status": 200, "ids": ids, "tokens": None, "finish": None}
    return {"plan": p, "status": 200, "ids": ids, "tokens": toks, "finish": finish}


async def _run(url: str, plans: list[dict]) -> list[dict]:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    http = httpx.AsyncClient(base_url=url, timeout=120)
    todo: asyncio.Queue = asyncio.Queue()
    for p in plans:
        todo.put_nowait(p)
    out: list[dict] = []

    async def worker():
        while not todo.empty():
            p = todo.get_nowait()
            try:
                out.append(await _one(client, http, p))
            except openai.APIStatusError as e:
                out.append({"plan": p, "status": e.status_code, "error": str(e)})
    await asyncio.gather(*(worker() for _ in range(CLIENTS)))
    await client.close()
    await http.aclose()
    return out


@pytest.fixture(scope="module")
def server():
    srv = start_server(num_blocks=NUM_BLOCKS, max_running=8)
    yield srv
    srv.stop()


def test_load_mixed_clients_no_errors_equal_generate_no_leaked_block(server):
    rng = random.Random(0)
    plans = [_plan(rng, i) for i in range(REQUESTS)]
    results = asyncio.run(_run(server.url, plans))
    assert len(results) == REQUESTS
    bad = [r for r in results if r["plan"]["malformed"]]
    assert bad and all(r["status"] == 400 for r in bad)
    valid = [r for r in results if not r["plan"]["malformed"]]
    assert [r for r in valid if r["status"] != 200] == []
    greedy = [r for r in valid if r["plan"]["greedy"] and r["tokens"] is not None]
    assert len(greedy) > REQUESTS // 2
    for r in greedy:
        want, reason = expected(r["ids"], r["plan"]["max_tokens"])
        assert (r["tokens"], r["finish"]) == (want, reason), r["plan"]
    assert server.loop.error is None
    end = drained(server.loop)
    assert end["active"] == end["running"] == end["waiting"] == end["requests"] == 0
    assert end["free_plus_tree"] == NUM_BLOCKS == end["free_after_evict"]
    preempted = server.loop.metrics.preemptions.labels(MODEL)._value.get()
    evicted = server.loop.metrics.engine.values["kvlab:evicted_tokens"]
    print(f"{REQUESTS} requests, {len(greedy)} greedy compared, {sum(r['plan']['disconnect'] for r in results)} "
          f"disconnected, {len(bad)} malformed; {preempted:.0f} preemptions, {evicted:.0f} tokens evicted")
