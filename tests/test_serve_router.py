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


SYSTEMS = ["You are the support assistant of a bookshop; answer in one short sentence.",
           "You are a patient maths tutor; explain each step in one short sentence."]


def _chats(url: str, tag: str, turns: int = 3) -> None:
    """Three conversations (two share a system prompt), ``turns`` turns each, interleaved as a room
    sends them (an odd number: round robin moves a conversation between the workers)."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
    convs = {f"{tag}-{i}": [{"role": "system", "content": SYSTEMS[i % 2]}] for i in range(3)}
    for t in range(turns):
        for user, msgs in convs.items():
            msgs.append({"role": "user", "content": f"question {t} of {user}"})
            r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=3, temperature=0, user=user)
            msgs.append({"role": "assistant", "content": r.choices[0].message.content})


def _run_policy(policy: str) -> dict:
    """Two fresh workers behind the router with ``policy``; the chats; the router view."""
    from kvlab.serve.router import router_view
    from serve_utils import metrics

    servers = [start_server(num_blocks=256) for _ in range(2)]
    try:
        try:
            router = Router.launch([s.url for s in servers], policy=policy)
        except (RouterError, OSError) as e:
            pytest.skip(f"the sglang-router binary could not start here: {e}")
        try:
            _chats(router.url, policy)
        finally:
            router.stop()
        view = router_view([s.url for s in servers])
        for w, s in zip(view["workers"], servers):
            m = metrics(s.url)
            assert w["requests"] == m.get("kvlab:request_success_total", 0)
            assert w["cached_tokens"] == m.get("vllm:prefix_cache_hits_total", 0)
            assert w["prompt_tokens"] == m.get("vllm:prompt_tokens_total", 0)
            assert w["hit_rate"] == (w["cached_tokens"] / w["prompt_tokens"] if w["prompt_tokens"] else 0.0)
        return view
    finally:
        for s in servers:
            s.stop()


def test_router_view_of_both_policies():
    """The router view is each worker's own record: which worker served each turn of each
    conversation, and its hit rate (= its /metrics). Round robin alternates the workers; cache
    aware keeps every conversation on one worker (its history is there) and computes fewer tokens."""
    computed = {}
    for policy in ("cache_aware", "round_robin"):
        view = _run_policy(policy)
        conv = view["conversations"]
        assert sorted(conv) == [f"chat {i}" for i in range(1, 4)] and all(len(t) == 3 for t in conv.values()), conv
        counts = [w["requests"] for w in view["workers"]]
        if policy == "round_robin":
            assert sorted(counts) == [4, 5], counts
            assert any(len(set(t)) > 1 for t in conv.values()), conv     # some conversation changed worker
        else:
            assert all(len(set(t)) == 1 for t in conv.values()), conv    # every conversation stays put
        computed[policy] = sum(w["prompt_tokens"] - w["cached_tokens"] for w in view["workers"])
    assert computed["cache_aware"] < computed["round_robin"], computed


def test_a_router_does_not_outlive_the_process_that_started_it():
    """Lesson 12 starts servers in its kernel and the router as a child process: when the kernel
    is killed (no clean-up runs), the router gets SIGTERM from the kernel (PR_SET_PDEATHSIG)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("from kvlab.serve.lab import start_lab\nimport time\nlab = start_lab(workers=1, num_blocks=32)\n"
            "print(lab.route('round_robin').proc.pid, flush=True)\ntime.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        line = child.stdout.readline()
        if not line.strip().isdigit():
            pytest.skip(f"the router did not start in the child: {line!r}")
        router_pid = int(line)
        os.kill(child.pid, signal.SIGKILL)                  # the kernel dies: no atexit, no stop()
        child.wait(timeout=10)
        for _ in range(100):
            try:
                os.kill(router_pid, 0)
            except ProcessLookupError:
                break
            if open(f"/proc/{router_pid}/stat").read().split()[2] == "Z":     # exited, not yet reaped
                break
            time.sleep(0.1)
        else:
            os.kill(router_pid, signal.SIGKILL)
            pytest.fail("the router outlived the process that started it")
    finally:
        if child.poll() is None:
            child.kill()


def test_what_the_cache_aware_router_does_on_a_miss():
    """Which rule sglang-router 0.3.2 follows (lesson 12 section 5 and exercise 2 teach it): it
    matches the messages' contents joined by spaces (not the chat template, not the JSON body); a
    match over 30% goes to the worker holding it; a miss goes to the LEAST LOADED worker (its own
    count of requests in flight), ties to the first worker of its list, NOT to the smaller tree
    (the policy's source comment). Two fresh workers, five requests, about 4 s."""
    import threading

    from kvlab.serve.lab import start_lab
    from kvlab.serve.router import router_view

    lab = start_lab(workers=2, num_blocks=256)
    try:
        try:
            router = lab.route("cache_aware")
        except (RouterError, OSError) as e:
            pytest.skip(f"the sglang-router binary could not start here: {e}")
        client = openai.OpenAI(base_url=router.url + "/v1", api_key="none", max_retries=0, timeout=60)
        counts = [0, 0]

        def went(msgs, max_tokens=2):
            client.chat.completions.create(model=lab.model, messages=msgs, max_tokens=max_tokens, temperature=0)
            now = [w["requests"] for w in router_view(lab.urls)["workers"]]
            moved = [i for i in range(2) if now[i] > counts[i]]
            counts[:] = now
            return moved

        long_text = "Quantum foam, zebra crossings and other unrelated words, " * 3
        first = went([{"role": "user", "content": long_text}])          # empty trees, idle: a miss
        assert len(first) == 1
        f = first[0]
        busy = threading.Thread(target=went, args=([{"role": "user", "content": "Tell a long story"}], 300))
        busy.start()                                                    # a miss too: to f (both idle)
        for _ in range(500):
            if lab.workers[f].loop.active:
                break
            threading.Event().wait(0.01)
        assert lab.workers[f].loop.active, "the long request never started on the first worker"
        shared = "The museum opens at nine and closes at five."
        other = went([{"role": "system", "content": shared}, {"role": "user", "content": "ok"}])
        busy.join()
        assert other == [1 - f], "a miss while the first worker is busy goes to the idle one (least loaded)"
        # idle again. The same words as a user message: the template differs, the contents do not.
        assert went([{"role": "user", "content": shared + " When?"}]) == [1 - f], \
            "a >30% match of the contents goes to the worker holding them, though the template differs"
        # f's tree holds far more characters than the other's: the smaller-tree rule would pick 1 - f
        assert went([{"role": "user", "content": "Completely different words"}]) == [f], \
            "a miss with both idle goes to the router's first worker, not to the smaller tree"
    finally:
        lab.stop()
