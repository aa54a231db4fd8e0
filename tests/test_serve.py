"""kvlab serve through the real openai client: replies equal generate(), cached tokens, metrics.

One server (the bundled model, 127.0.0.1, a free port) for the module; every reply compared with
``generate()`` token for token (vLLM's ``return_token_ids`` extension) and as text.
"""
from __future__ import annotations

import asyncio

import pytest

from serve_utils import (MODEL, bundled, chat_ids, drained, expected, greedy_tokens as generate_tokens, metrics,
                         start_server)

import openai  # noqa: E402  (serve_utils skipped the module when it is missing)

PROMPTS = ["def hello():", "import socket\n", "The socket module", "for i in range(", "class Foo:",
           "Return the list", "x = [1, 2,", "# a comment\n"]
TOKEN_IDS = {"return_token_ids": True}


@pytest.fixture(scope="module")
def server():
    srv = start_server()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def _tok():
    return bundled()[1]


def test_completions_sync_equal_generate(client):
    for p in PROMPTS[:4]:
        ids = _tok().encode(p)
        r = client.completions.create(model=MODEL, prompt=p, max_tokens=10, temperature=0, extra_body=TOKEN_IDS)
        want, reason = expected(ids, 10)
        c = r.choices[0]
        assert c.model_extra["token_ids"] == want and c.finish_reason == reason, p
        assert c.text == _tok().decode(want) and r.model_extra["prompt_token_ids"] == ids
        assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == len(want)
    r = client.completions.create(model=MODEL, prompt=_tok().encode(PROMPTS[4]), max_tokens=6, temperature=0,
                                  extra_body=TOKEN_IDS)                   # a prompt of token ids
    assert r.choices[0].model_extra["token_ids"] == expected(_tok().encode(PROMPTS[4]), 6)[0]


def test_a_stop_token_ends_a_reply_unless_ignore_eos():
    """The bundled model never emits its EOS, so this server's end token is one its reply reaches."""
    ids = _tok().encode(PROMPTS[2])
    full = list(generate_tokens(ids, 12))
    end = full[4]
    srv = start_server(num_blocks=64, stop_token_ids=(end,))
    try:
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        r = c.completions.create(model=MODEL, prompt=ids, max_tokens=12, temperature=0, extra_body=TOKEN_IDS)
        want = full[:full.index(end) + 1]
        assert r.choices[0].finish_reason == "stop" and r.choices[0].model_extra["token_ids"] == want
        assert r.usage.completion_tokens == len(want) < 12
        r = c.completions.create(model=MODEL, prompt=ids, max_tokens=12, temperature=0,
                                 extra_body={**TOKEN_IDS, "ignore_eos": True})
        assert r.choices[0].finish_reason == "length" and r.choices[0].model_extra["token_ids"] == full
    finally:
        srv.stop()


def test_chat_sync_and_stop_strings(client, server):
    msgs = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "a socket server"}]
    ids = chat_ids(msgs)
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, temperature=0, extra_body=TOKEN_IDS)
    want, reason = expected(ids, 12)
    c = r.choices[0]
    assert c.model_extra["token_ids"] == want and c.finish_reason == reason and c.message.role == "assistant"
    text = _tok().decode(want)
    assert c.message.content == text
    stop = text[len(text) // 2:len(text) // 2 + 3]                            # a stop string the reply reaches
    assert stop.strip(), text
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=12, temperature=0, stop=[stop, "@@"])
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == text[:text.index(stop)]
    assert drained(server.loop)["active"] == 0                                # the engine aborted it, nothing leaked


def test_streaming_equals_the_whole_reply(client):
    for kind in ("chat", "text"):
        p = PROMPTS[5]
        if kind == "chat":
            msgs = [{"role": "user", "content": p}]
            ids = chat_ids(msgs)
            stream = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=9, temperature=0,
                                                    stream=True, stream_options={"include_usage": True},
                                                    extra_body=TOKEN_IDS)
        else:
            ids = _tok().encode(p)
            stream = client.completions.create(model=MODEL, prompt=p, max_tokens=9, temperature=0, stream=True,
                                               stream_options={"include_usage": True}, extra_body=TOKEN_IDS)
        text, toks, finish, usage = "", [], None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                text += (c.delta.content or "") if kind == "chat" else c.text
                toks += c.model_extra.get("token_ids") or []
                finish = c.finish_reason or finish
        want, reason = expected(ids, 9)
        assert toks == want and text == _tok().decode(want) and finish == reason, kind
        assert usage.completion_tokens == len(want) and usage.prompt_tokens == len(ids)


def test_async_client_concurrent_requests_equal_generate(server):
    async def main():
        aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
        reqs = [aclient.completions.create(model=MODEL, prompt=p, max_tokens=8, temperature=0, extra_body=TOKEN_IDS)
                for p in PROMPTS]
        out = await asyncio.gather(*reqs)
        await aclient.close()
        return out
    for p, r in zip(PROMPTS, asyncio.run(main())):
        assert r.choices[0].model_extra["token_ids"] == expected(_tok().encode(p), 8)[0], p


def test_n_samples_with_a_seed_are_reproducible(client):
    kw = dict(model=MODEL, prompt=PROMPTS[6], max_tokens=6, temperature=0.8, top_p=0.9, seed=5, n=3,
              extra_body=TOKEN_IDS)
    a, b = client.completions.create(**kw), client.completions.create(**kw)
    toks = [c.model_extra["token_ids"] for c in a.choices]
    assert toks == [c.model_extra["token_ids"] for c in b.choices] and [c.index for c in a.choices] == [0, 1, 2]
    assert a.usage.completion_tokens == sum(map(len, toks)) and len(set(map(tuple, toks))) > 1


def test_cached_tokens_are_the_trees_match_for_a_repeated_system_prompt(client, server):
    system = {"role": "system", "content": "You are a careful assistant who answers in Python code, with short "
                                           "comments, and never more than ten lines."}
    first = [system, {"role": "user", "content": "open a socket"}]
    r1 = client.chat.completions.create(model=MODEL, messages=first, max_tokens=3, temperature=0)
    second = [system, {"role": "user", "content": "read a file"}]
    ids = chat_ids(second)
    match = server.loop.call(lambda e: min(e.cache.peek_prefix_len(ids), len(ids) - 1))
    r2 = client.chat.completions.create(model=MODEL, messages=second, max_tokens=3, temperature=0)
    shared = len(chat_ids([system]))
    assert r2.usage.prompt_tokens_details.cached_tokens == match
    assert match >= shared - 2 * server.loop.engine.block_size > 0               # the system prompt, page-aligned
    assert r1.usage.prompt_tokens_details.cached_tokens <= r1.usage.prompt_tokens


def test_metrics_parse_and_count_what_was_sent(client, server):
    before = metrics(server.url)
    ids = _tok().encode(PROMPTS[7])
    r = client.completions.create(model=MODEL, prompt=PROMPTS[7], max_tokens=7, temperature=0)
    after = metrics(server.url)
    d = lambda name: after[name] - before.get(name, 0)
    assert d("vllm:prompt_tokens_total") == len(ids) == d("vllm:prefix_cache_queries_total")
    assert d("vllm:generation_tokens_total") == r.usage.completion_tokens
    assert d("vllm:prefix_cache_hits_total") == r.usage.prompt_tokens_details.cached_tokens
    assert d("vllm:time_to_first_token_seconds_count") == 1 == d("vllm:e2e_request_latency_seconds_count")
    assert d("vllm:inter_token_latency_seconds_count") == r.usage.completion_tokens - 1
    assert d("kvlab:request_success_total") == 1
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:num_preemptions_total", "kvlab:tree_nodes", "kvlab:tree_tokens", "kvlab:evicted_tokens_total",
                 "kvlab:host_hit_tokens_total", "kvlab:disk_hit_tokens_total", "kvlab:free_blocks"):
        assert name in after, name
    assert 0 < after["vllm:kv_cache_usage_perc"] <= 1 and after["kvlab:tree_tokens"] > 0


def test_info_routes_for_sglang_router(server):
    import httpx

    assert httpx.get(server.url + "/health").status_code == 200
    info = httpx.get(server.url + "/server_info").json()
    assert info["page_size"] == 4 and info["max_total_num_tokens"] == 256 * 4
    assert httpx.get(server.url + "/model_info").json()["is_generation"] is True
    models = httpx.get(server.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL]


def test_a_client_that_goes_away_aborts_its_request(server):
    """Streamed or not, a disconnected request is aborted in the engine (well before its max_tokens)."""
    import httpx

    aborted = lambda: server.loop.metrics.success.labels(MODEL, "abort")._value.get()
    before = aborted()
    body = {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 800, "temperature": 0, "ignore_eos": True}
    with httpx.stream("POST", server.url + "/v1/completions", json={**body, "stream": True}, timeout=30) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")                    # the first chunk, then the client leaves
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/completions", json=body, timeout=0.5)
    end = drained(server.loop)
    assert aborted() - before == 2 and end["active"] == 0
    assert end["free_plus_tree"] == end["free_after_evict"] == 256   # the aborted tokens were cached, then evicted
