"""kvlab's engine behind an OpenAI-compatible HTTP server: ``python -m kvlab serve``.

    loop.py      EngineLoop: one thread drives Engine.step; a queue in, a stream per request out
    detok.py     TextStream: incremental detokenizing and stop strings
    protocol.py  OpenAI's request bodies and error shape (pydantic, checked once)
    app.py       the FastAPI routes: /v1/chat/completions, /v1/completions, /v1/models, /health,
                 /server_info, /model_info, /metrics
    metrics.py   Prometheus metrics, vLLM's names and kvlab's
    server.py    uvicorn, in this thread or in a background thread on a free port
    cli.py       the ``serve`` command's flags
    dashboard.py what ``/dashboard`` draws: the pool, the tree (tiers, evicted ghosts), copy-on-write
    router.py    sglang-router in front of kvlab servers; ``router_view``: who served which conversation
    lab.py       servers (and a router) in the background of a notebook, stopped with it (lesson 12)

This package needs FastAPI, uvicorn and prometheus_client (the ``serve`` extra); nothing below it
imports it, so the kernels, the model and bench/ run without them.
"""
