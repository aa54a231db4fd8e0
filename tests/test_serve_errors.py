"""Bad input to kvlab serve: OpenAI's error body naming the field, the right status, never a
traceback, and the engine's state exactly as it was (issue 33, item 5)."""
from __future__ import annotations

import threading

import pytest

from serve_utils import MODEL, engine_state, start_server

import httpx  # noqa: E402

OK = {"model": MODEL, "prompt": "def hello():", "max_tokens": 2, "temperature": 0}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
C, CC = "/v1/completions", "/v1/chat/completions"
CASES = [  # (id, path, body (dict: JSON; bytes: raw), status, param)
    ("malformed json", C, b'{"prompt": "x",', 400, None),
    ("not an object", C, b'[1, 2]', 400, None),
    ("not utf-8", C, b'{"prompt": "\xff"}', 400, None),
    ("max_tokens a string", C, {**OK, "max_tokens": "3"}, 400, "max_tokens"),
    ("max_tokens a float", C, {**OK, "max_tokens": 2.5}, 400, "max_tokens"),
    ("max_tokens negative", C, {**OK, "max_tokens": -1}, 400, "max_tokens"),
    ("max_tokens zero", C, {**OK, "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens over the context", C, {**OK, "max_tokens": 5000}, 400, "max_tokens"),
    ("max_tokens over the pool", C, {**OK, "max_tokens": 1000}, 400, "max_tokens"),
    ("temperature a string", C, {**OK, "temperature": "hot"}, 400, "temperature"),
    ("temperature negative", C, {**OK, "temperature": -0.5}, 400, "temperature"),
    ("top_p zero", C, {**OK, "top_p": 0}, 400, "top_p"),
    ("seed negative", C, {**OK, "seed": -3}, 400, "seed"),
    ("stream a string", C, {**OK, "stream": "yes"}, 400, "stream"),
    ("n over the limit", C, {**OK, "n": 9}, 400, "n"),
    ("n zero", C, {**OK, "n": 0}, 400, "n"),
    ("too many stop strings", C, {**OK, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("an empty stop string", C, {**OK, "stop": [""]}, 400, "stop"),
    ("stop a number", C, {**OK, "stop": 7}, 400, "stop"),
    ("unknown model", C, {**OK, "model": "gpt-4o"}, 404, "model"),
    ("prompt missing", C, {"model": MODEL}, 400, "prompt"),
    ("prompt empty", C, {**OK, "prompt": ""}, 400, "prompt"),
    ("prompt ids out of the vocabulary", C, {**OK, "prompt": [5, 10 ** 6]}, 400, "prompt"),
    ("prompt ids negative", C, {**OK, "prompt": [5, -2]}, 400, "prompt"),
    ("prompt longer than the context", C, {**OK, "prompt": [7] * 2100}, 400, "prompt"),
    ("logprobs unsupported", C, {**OK, "logprobs": 2}, 400, "logprobs"),
    ("messages missing", CC, {"model": MODEL}, 400, "messages"),
    ("messages empty", CC, {**CHAT, "messages": []}, 400, "messages"),
    ("content an int", CC, {**CHAT, "messages": [{"role": "user", "content": 5}]}, 400, "messages.0.content"),
    ("unknown role", CC, {**CHAT, "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role"),
    ("chat unknown model", CC, {**CHAT, "model": "llama"}, 404, "model"),
    ("chat max_completion_tokens over the context", CC, {**CHAT, "max_completion_tokens": 9000}, 400, "max_tokens"),
    ("body over 1 MB", C, {**OK, "prompt": "x" * (1 << 20)}, 413, None),
]


@pytest.fixture(scope="module")
def server():
    srv = start_server(num_blocks=128)
    yield srv
    srv.stop()


def _check_error(r: httpx.Response, status: int, param: str | None) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert body["error"]["param"] == param, body
    assert body["error"]["message"] and "Traceback" not in r.text
    return body["error"]


@pytest.mark.parametrize("path, body, status, param", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_answers_openai_errors_and_changes_nothing(server, path, body, status, param):
    before = engine_state(server.loop)
    raw = isinstance(body, bytes)
    kw = {"content": body, "headers": {"content-type": "application/json"}} if raw else {"json": body}
    for stream in (False, True):                  # the streaming path checks the same, before any chunk
        if stream and isinstance(body, dict):
            kw = {"json": {**body, "stream": True}} if "stream" not in body else kw
        _check_error(httpx.post(server.url + path, timeout=30, **kw), status, param)
    assert engine_state(server.loop) == before


def test_unknown_route_and_method(server):
    assert _check_error(httpx.get(server.url + "/v1/nothing"), 404, None)["code"] == "not_found"
    _check_error(httpx.get(server.url + C), 405, None)


def test_a_good_request_after_the_bad_ones(server):
    r = httpx.post(server.url + C, json=OK, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_api_key_and_429_when_the_waiting_queue_is_full():
    srv = start_server(num_blocks=64, api_key="s3cret", max_waiting=2)
    try:
        url, good = srv.url, {"authorization": "Bearer s3cret"}
        before = engine_state(srv.loop)
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
            for method, path in (("POST", C), ("POST", CC), ("GET", "/v1/models")):
                r = httpx.request(method, url + path, json=OK if path == C else CHAT, headers=headers)
                assert _check_error(r, 401, None)["code"] == "invalid_api_key"
        assert httpx.get(url + "/health").status_code == 200 and httpx.get(url + "/metrics").status_code == 200
        assert engine_state(srv.loop) == before
        assert httpx.get(url + "/v1/models", headers=good).status_code == 200
        release = threading.Event()                                    # hold the engine thread between steps
        held = threading.Thread(target=srv.loop.call, args=(lambda e: release.wait(20),))
        held.start()
        results: list[httpx.Response] = []
        first = [threading.Thread(target=lambda: results.append(httpx.post(url + C, json=OK, headers=good,
                                                                           timeout=30))) for _ in range(2)]
        for t in first:
            t.start()
        for _ in range(200):                                            # both queued, neither admitted
            if srv.loop.num_unadmitted == 2:
                break
            threading.Event().wait(0.02)
        third = httpx.post(url + C, json=OK, headers=good, timeout=30)
        assert _check_error(third, 429, None)["code"] == "rate_limit_exceeded"
        release.set()
        held.join()
        for t in first:
            t.join()
        assert [r.status_code for r in results] == [200, 200]
    finally:
        srv.stop()


def test_a_public_host_needs_an_api_key(capsys):
    from kvlab.__main__ import main

    assert main(["serve", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "--api-key" in err and "0.0.0.0" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as e:
        main(["serve", "--kv-memory", "lots"])
    assert e.value.code == 2 and "expected a size like 256MiB" in capsys.readouterr().err


def test_the_serve_command_loads_and_sizes_before_serving():
    import argparse

    from kvlab.serve import cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    a = p.parse_args(["--model", "bundled", "--kv-memory", "1MiB", "--block-size", "8"])
    model, tok, served, _ = cli._load(a)
    c = model.config
    per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 4          # fp32 K and V
    assert served == "kvlab-bundled" and cli.num_blocks_for(model, a) == (1 << 20) // (8 * per_token)
    assert cli.num_blocks_for(model, p.parse_args(["--num-blocks", "7"])) == 7
    with pytest.raises(cli.ServeUsageError, match="holds 0 blocks"):
        cli.num_blocks_for(model, p.parse_args(["--kv-memory", "100"]))
    with pytest.raises(cli.ServeUsageError, match="--storage needs --host-ratio"):
        cli.check_args(p.parse_args(["--storage", "/tmp/x"]))
    assert cli.parse_bytes("64 KiB") == 65536 and cli.parse_bytes("1.5GB") == 1_500_000_000
