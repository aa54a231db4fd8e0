"""Two kvlab servers behind SGLang's real router (sglang-router): both answer through it, and
every greedy reply equals generate(). Skipped only when the router binary cannot start."""
from __future__ import annotations

import importlib.util

import pytest

from serve_utils import MODEL, bundled, chat_ids, expected, start_server

import openai  # noqa: E402

if importlib.util.find_spec("sglang_router") is None:
    pytest.skip("sglang-router is not installed (pip install sglang-router==0.3.2)", allow_module_level=True)

from kvlab.serve.router import Router, RouterError  # noqa: E402


@pytest.fixture(scope="module")
def workers():
    servers = [start_server(num_blocks=128) for _ in range(2)]
    yield servers
    for s in servers:
        s.stop()


def test_two_servers_answer_through_the_router(workers):
    try:
        router = Router.launch([s.url for s in workers], policy="round_robin")
    except (RouterError, OSError) as e:
        pytest.skip(f"the sglang-router binary could not start here: {e}")
    try:
        client = openai.OpenAI(base_url=router.url + "/v1", api_key="none", max_retries=0, timeout=60)
        for i in range(4):
            msgs = [{"role": "user", "content": f"task {i}: sort a list"}]
            r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4, temperature=0)
            want, reason = expected(chat_ids(msgs), 4)      # the router drops return_token_ids: compare text
            assert (r.choices[0].message.content, r.choices[0].finish_reason) == (bundled()[1].decode(want), reason)
            assert r.usage.completion_tokens == len(want)
    finally:
        router.stop()
    served = [s.loop.metrics.success.labels(MODEL, "length")._value.get() +
              s.loop.metrics.success.labels(MODEL, "stop")._value.get() for s in workers]
    assert sum(served) == 4 and min(served) >= 1, served          # round robin: both workers answered
