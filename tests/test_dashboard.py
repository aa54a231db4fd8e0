"""The dashboard's server-sent state is the server's real state: after each of three requests it
shows the blocks ``/metrics`` reports in use and the tree's node count; the chat page's record
names the request that put each cached token in the tree; the events need the API key.

One bundled-model server (127.0.0.1, a free port, every invariant checked after every step).
"""
from __future__ import annotations

import json
import time

import pytest

from serve_utils import MODEL, chat_ids, metrics, start_server

import httpx  # noqa: E402  (serve_utils skipped the module when the serve extra is missing)

SYSTEM = "You are a careful assistant who answers in Python code, with short comments."
QUESTIONS = ["open a socket", "read a file", "open a socket and listen"]


@pytest.fixture(scope="module")
def server():
    srv = start_server()
    yield srv
    srv.stop()


def events(url: str, count: int, timeout: float = 5.0, params: dict | None = None) -> list[dict]:
    """The first ``count`` states the dashboard's event stream sends."""
    out = []
    with httpx.stream("GET", url + "/dashboard/events", params=params, timeout=timeout) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
                if len(out) == count:
                    return out
    return out


def _chat(url: str, question: str, user: str) -> dict:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    r = httpx.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": msgs, "max_tokens": 6,
                                                        "temperature": 0, "user": user}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_events_show_what_metrics_report_after_each_of_three_requests(server):
    for i, q in enumerate(QUESTIONS):
        reply = _chat(server.url, q, f"student{i}")
        rid = reply["id"].removeprefix("chatcmpl-")
        deadline = time.monotonic() + 1.0                      # the request's end is on the stream within 1 s
        while True:
            state = events(server.url, 1)[0]
            rows = {r["rid"]: r for r in state["requests"]}
            if rid in rows and rows[rid]["state"] == "finished" or time.monotonic() > deadline:
                break
        m = metrics(server.url)
        assert rows[rid]["state"] == "finished" and rows[rid]["name"] == f"student{i}"
        assert rows[rid]["cached"] == reply["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert state["used_blocks"] == m["kvlab:num_blocks"] - m["kvlab:free_blocks"] > 0
        assert state["tree_nodes"] == m["kvlab:tree_nodes"] and state["tree_tokens"] == m["kvlab:tree_tokens"]
        assert state["evicted_tokens"] == m["kvlab:evicted_tokens_total"]
        assert len(state["tree"]) == server.loop.call(lambda e: sum(1 for _ in e.cache.iter_nodes()))
        assert state["last"] == rid
        blocks = state["blocks"]
        assert sum(s != 0 for s in blocks["state"]) == state["used_blocks"]
        assert all((s == 0) == (ref == 0) and (s == 3) == (ref > 1) for s, ref in zip(blocks["state"], blocks["ref"]))
        marks = [n["mark"] for n in state["tree"]]
        assert ("hit" in marks) == (rows[rid]["cached"] > 0) and "computed" in marks


def test_a_split_node_keeps_its_inserter_and_the_chat_record_names_it(server):
    first = _chat(server.url, "write a loop", "ana")
    second = _chat(server.url, "write a class", "ben")
    rid1, rid2 = (r["id"].removeprefix("chatcmpl-") for r in (first, second))
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    shared = len(chat_ids([{"role": "system", "content": SYSTEM}]))
    assert cached >= shared - 2 * server.loop.engine.block_size > 0
    sources = httpx.get(server.url + f"/chat/request/{rid2}").json()["sources"]
    assert sum(s["tokens"] for s in sources) == cached
    assert sources[0]["rid"] in {rid1} | {f"req-{i}" for i in range(1, int(rid1.split("-")[1]))}
    assert httpx.get(server.url + "/chat/request/req-999").status_code == 404
    state = events(server.url, 1)[0]
    by_source = {n["source"] for n in state["tree"]}
    assert rid2 in by_source and "?" not in by_source              # ben's branch is his, none unknown


def test_events_only_when_the_state_changed(server):
    _chat(server.url, "print hello", "cy")
    time.sleep(0.3)
    t0 = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):                          # idle: one state, then nothing
        events(server.url, 2, timeout=0.6)
    assert time.monotonic() - t0 < 2


def test_pages_and_plotly_are_served_locally(server):
    page = httpx.get(server.url + "/dashboard")
    assert page.status_code == 200 and '<script src="/dashboard/plotly.min.js">' in page.text
    assert "http://" not in page.text and "https://" not in page.text and len(page.content) < 2_000_000
    js = httpx.get(server.url + "/dashboard/plotly.min.js")
    assert js.status_code == 200 and b"plotly" in js.content[:2000]
    chat = httpx.get(server.url + "/chat")
    assert chat.status_code == 200 and "/v1/chat/completions" in chat.text
    assert httpx.get(server.url + "/chat/config").json()["needs_key"] is False


def test_with_an_api_key_the_events_and_records_need_it():
    srv = start_server(num_blocks=64, api_key="s3cret")
    try:
        assert httpx.get(srv.url + "/chat/config").json()["needs_key"] is True
        r = httpx.get(srv.url + "/dashboard/events", timeout=5)
        assert r.status_code == 401 and "--api-key" in r.json()["error"]["message"]
        assert httpx.get(srv.url + "/dashboard/events", params={"key": "wrong"}, timeout=5).status_code == 401
        httpx.post(srv.url + "/v1/completions", json={"prompt": "def hello(name): return name", "max_tokens": 4},
                   headers={"Authorization": "Bearer s3cret"}).raise_for_status()
        assert events(srv.url, 1, params={"key": "s3cret"})[0]["used_blocks"] > 0
        assert httpx.get(srv.url + "/chat/request/req-1").status_code == 401
    finally:
        srv.stop()


def _prompt(i: int) -> str:
    return f"def function_number_{i}(values, scale): return [v * scale for v in values]  # {i}"


def test_tiers_copy_on_write_ghosts_and_served_are_the_engine_s_own():
    """With tiers on every node says where its KV is (the tree's own placement); a parallel
    sample's copy-on-write copies are the log's ``cow`` destinations; an evicted node stays a
    moment as a ghost with its tokens; ``/dashboard/served`` lists each user's requests."""
    srv = start_server(num_blocks=24, host_ratio=2.0)
    srv.loop.dashboard.ghost_s = 60.0
    try:
        for i in range(6):                                     # more than the device pool holds: evictions
            httpx.post(srv.url + "/v1/completions", json={"prompt": _prompt(i), "max_tokens": 3, "temperature": 0,
                                                          "user": f"u{i % 2}"}, timeout=30).raise_for_status()
        state = events(srv.url, 1)[0]
        want = srv.loop.call(lambda e: {n.id: e.cache.placement(n) for n in e.cache.iter_nodes()})
        assert state["tiers"] is True and {n["id"]: n["tier"] for n in state["tree"]} == want
        assert {"host", "device"} <= set(want.values()) or "both" in set(want.values()), want
        ids = srv.loop.call(lambda e: {n.id: list(n.key) for n in e.cache.iter_nodes()})
        assert all(n["ids"] == ids[n["id"]] and n["evicted"] is False for n in state["tree"])
        served = httpx.get(srv.url + "/dashboard/served").json()["requests"]
        assert [r["name"] for r in served] == ["u0", "u1"] * 3
        assert [r["ids"] for r in served] == [srv.loop.tokenizer.encode(_prompt(i)) for i in range(6)]
        assert all(r["prompt"] == len(r["ids"]) and 0 <= r["cached"] < r["prompt"] for r in served)
    finally:
        srv.stop()
    srv = start_server(num_blocks=20)
    srv.loop.dashboard.ghost_s = 60.0
    try:
        cows = srv.loop.call(lambda e: len(e.log.since(0, "cow")))
        flashed: list[int] = []
        capture = srv.loop.dashboard.capture

        def recording(*a, **k):                                # every state the page could get
            state = capture(*a, **k)
            flashed.extend(state["cow_blocks"])
            return state
        srv.loop.dashboard.capture = recording
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": "def add(a, b):", "max_tokens": 5, "n": 2,
                                                          "temperature": 1.0, "seed": 1}, timeout=30)
        r.raise_for_status()
        cow_dst = srv.loop.call(lambda e: sorted({ev.detail["dst"] for ev in e.log.since(cows, "cow")}))
        assert cow_dst, "two samples of a prompt that ends inside a block copy it on write"
        srv.loop.call(lambda e: srv.loop.dashboard.capture(e, srv.loop, force=True))
        assert sorted(set(flashed)) == cow_dst and len(flashed) == len(set(flashed))   # each copy flashed once
        for i in range(5):
            httpx.post(srv.url + "/v1/completions", json={"prompt": _prompt(i), "max_tokens": 3,
                                                          "temperature": 0}, timeout=30).raise_for_status()
        state = events(srv.url, 1)[0]
        evicted = srv.loop.call(lambda e: e.cache.stats.evicted_tokens)
        ghosts = state["evicted_nodes"]
        assert evicted > 0 and ghosts and all(g["evicted"] and len(g["ids"]) == g["tokens"] > 0 for g in ghosts)
        live = {n["id"] for n in state["tree"]}
        assert not live & {g["id"] for g in ghosts}
        assert sum(g["tokens"] for g in ghosts) <= evicted
    finally:
        srv.stop()


def test_an_open_dashboard_does_not_hold_up_a_stop(caplog):
    """Found by lesson 12's browser run: a page left open kept its event stream running, so
    stopping the server ran into uvicorn's graceful-shutdown limit and logged a cancelled task.
    Stopping now ends the stream first; the reader sees it close."""
    import logging
    import threading

    srv = start_server(num_blocks=32)
    got, ended = [], threading.Event()

    def read():
        try:
            with httpx.stream("GET", srv.url + "/dashboard/events", timeout=30) as r:
                for line in r.iter_lines():
                    got.append(line)
        except httpx.HTTPError:
            pass
        ended.set()
    t = threading.Thread(target=read, daemon=True)
    t.start()
    httpx.post(srv.url + "/v1/completions", json={"prompt": "def f(x):", "max_tokens": 2}, timeout=30)
    time.sleep(0.3)
    log = logging.getLogger("uvicorn.error")                  # uvicorn's loggers do not propagate
    log.addHandler(caplog.handler)
    try:
        srv.stop()
    finally:
        log.removeHandler(caplog.handler)
    assert ended.wait(5) and any(x.startswith("data: ") for x in got)
    assert not [r for r in caplog.records if "graceful shutdown" in r.getMessage() or r.exc_info], caplog.text


def test_a_request_is_in_the_served_record_when_its_answer_arrives(server):
    """Review of 6b9afee (lesson 12): round robin showed 8 of the 9 requests sent. The engine thread
    pushed the answer to the client before it added the request to /dashboard/served, so a client
    reading the record right after its last answer could miss that request. A slow record (the
    engine thread busy for 0.3 s) makes the old order fail every time."""
    finished_request = server.loop.dashboard.finished_request

    def slow(row):
        time.sleep(0.3)
        finished_request(row)
    server.loop.dashboard.finished_request = slow
    try:
        _answered_then_served(server)
    finally:
        server.loop.dashboard.finished_request = finished_request


def _answered_then_served(server) -> None:
    for i in range(3):
        before = len(httpx.get(server.url + "/dashboard/served", timeout=10).json()["requests"])
        r = httpx.post(server.url + "/v1/completions", json={"prompt": _prompt(100 + i), "max_tokens": 2}, timeout=30)
        assert r.status_code == 200, r.text
        served = httpx.get(server.url + "/dashboard/served", timeout=10).json()["requests"]
        assert len(served) == before + 1, f"request {i}: answered, but not yet in the served record"
        assert served[-1]["prompt"] == r.json()["usage"]["prompt_tokens"]
