"""Helpers of the server tests: a bundled-model server on 127.0.0.1 and a free port, and the
tokens ``generate()`` gives for a prompt (what every greedy reply must equal up to its stop)."""
from __future__ import annotations

import functools

import fastapi  # noqa: F401,E402  (installed by the set-up: a missing one fails, never skips)
import openai  # noqa: F401,E402

from kvlab.compute.generate import generate  # noqa: E402
from kvlab.compute.loader import load_bundled  # noqa: E402
from kvlab.serve.app import chat_prompt_ids, stop_token_ids  # noqa: E402
from kvlab.serve.loop import EngineLoop  # noqa: E402
from kvlab.serve.server import serve_in_thread  # noqa: E402

MODEL = "tiny"


@functools.lru_cache(maxsize=1)
def bundled():
    return load_bundled()


def start_server(num_blocks: int = 256, block_size: int = 4, **kwargs):
    """A server for the bundled model with every invariant checked after every step."""
    model, tok = bundled()
    api_key, stops = kwargs.pop("api_key", None), kwargs.pop("stop_token_ids", None)
    loop = EngineLoop(model, tok, num_blocks=num_blocks, block_size=block_size, model_name=MODEL, check=True,
                      **kwargs)
    return serve_in_thread(loop, api_key=api_key, stop_token_ids=stops)


@functools.lru_cache(maxsize=512)
def _greedy(ids: tuple[int, ...], max_tokens: int) -> tuple[int, ...]:
    model, _ = bundled()
    return tuple(generate(model, list(ids), max_tokens).tokens)


def greedy_tokens(ids: list[int], max_tokens: int) -> tuple[int, ...]:
    """generate()'s greedy tokens, all ``max_tokens`` of them (no stop)."""
    return _greedy(tuple(ids), max_tokens)


def expected(ids: list[int], max_tokens: int) -> tuple[list[int], str]:
    """generate()'s greedy tokens for ``ids``, cut after the first stop token; and the finish reason."""
    _, tok = bundled()
    stops = set(stop_token_ids(tok))
    toks = list(_greedy(tuple(ids), max_tokens))
    for i, t in enumerate(toks):
        if t in stops:
            return toks[:i + 1], "stop"
    return toks, "length"


def chat_ids(messages: list[dict]) -> list[int]:
    return chat_prompt_ids(bundled()[1], messages)


def engine_state(loop: EngineLoop) -> tuple:
    """What a refused request must leave unchanged (read in the engine thread)."""
    def read(e):
        e.check_integrity()
        return (e.step_no, len(e.requests), len(e.pending), e.allocator.num_free_blocks,
                e.cache.total_size() if e.cache is not None else 0, loop.num_unadmitted)
    return loop.call(read)


def drained(loop: EngineLoop) -> dict:
    """Once every request has ended: the invariants, free + tree blocks, then the free count after
    evicting the whole (unlocked) tree."""
    import time

    for _ in range(400):
        if loop.call(lambda e: not loop._active and not e.running and not e.waiting and not e.pending):
            break
        time.sleep(0.05)

    def read(e):
        e.check_integrity()
        tree_blocks = len(e.cache.tree_block_ids())
        out = {"active": len(loop._active), "running": len(e.running), "waiting": len(e.waiting),
               "free_plus_tree": e.allocator.num_free_blocks + tree_blocks, "requests": len(e.requests)}
        e.cache.evict(e.cache.total_size())
        e.check_integrity()
        out["free_after_evict"] = e.allocator.num_free_blocks
        return out
    return loop.call(read)


def metrics(url: str) -> dict:
    """``/metrics`` parsed: each sample's name -> its value (summed over labels)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out: dict = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0) + s.value
    return out


def lesson_traffic(url: str, model: str) -> list:
    """Lesson 12's requests (the notes' four, then chats of three customers, four turns each): with a
    pool of 96 blocks of 4 tokens its tree is crowded and evicts; returns the chats' messages.

    Example: ``lesson_traffic(srv.url, MODEL)`` -> three lists of messages, each ending in a reply."""
    import openai

    from kvlab.lessons.chat import SUPPORT_EXAMPLES, SUPPORT_QUESTIONS, SUPPORT_SYSTEM

    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
    shop = [{"role": "system", "content": SUPPORT_SYSTEM}]
    for q, a in SUPPORT_EXAMPLES:
        shop += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]

    def ask(messages):
        r = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0)
        return messages + [{"role": "assistant", "content": r.choices[0].message.content}]

    r1 = ask(shop + [{"role": "user", "content": SUPPORT_QUESTIONS["R1"][0]}])
    for rid in ("R2", "R3"):
        ask(shop + [{"role": "user", "content": SUPPORT_QUESTIONS[rid][0]}])
    ask(r1 + [{"role": "user", "content": SUPPORT_QUESTIONS["R4"][0]}])
    chats = {name: list(shop) for name in ("ana", "ben", "cai")}
    for turn, q in enumerate(["Where is my parcel?", "It has been a week.", "Can you send it again?",
                              "And what about the refund?"]):
        for name in chats:
            chats[name] = ask(chats[name] + [{"role": "user", "content": f"{q} ({name})"}])
    return list(chats.values())
