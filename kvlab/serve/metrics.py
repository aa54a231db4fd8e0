"""``GET /metrics``: the server's Prometheus metrics, vLLM's names where vLLM has one.

Two kinds, kept in one registry per server (two servers in one process never collide):

- per request, counted by the engine loop as tokens are sent: ``vllm:prompt_tokens``,
  ``vllm:generation_tokens``, ``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits``
  (prompt tokens looked up / found in the radix tree at admission), ``vllm:num_preemptions``,
  ``kvlab:prefill_computed_tokens`` (prompt tokens run through the model, re-prefills included),
  ``kvlab:request_success`` by finish reason, and the histograms
  ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``,
  ``vllm:e2e_request_latency_seconds``;
- read from the engine after each step (a snapshot the loop replaces; the collector only reads
  it): ``vllm:num_requests_running`` / ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``
  (used blocks / all, 0 to 1 as vLLM reports it), and what only kvlab has: ``kvlab:tree_nodes``,
  ``kvlab:tree_tokens``, ``kvlab:evicted_tokens``, ``kvlab:host_hit_tokens``,
  ``kvlab:disk_hit_tokens``, ``kvlab:free_blocks``, ``kvlab:num_blocks``.

prometheus_client adds ``_total`` to counters (``vllm:prompt_tokens_total``), as vLLM's output has.
Every metric carries the label ``model_name``.

Example:
    >>> m = ServeMetrics("tiny")
    >>> m.prompt_tokens.labels("tiny").inc(5)
    >>> b"vllm:prompt_tokens_total" in m.exposition()
    True
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["ServeMetrics", "engine_snapshot"]

TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0)
_GAUGES = {"vllm:num_requests_running": "requests running on the engine",
           "vllm:num_requests_waiting": "requests waiting to be admitted (queued or in the engine's queue)",
           "vllm:kv_cache_usage_perc": "KV-cache usage: used blocks / all blocks (1 = 100%)",
           "kvlab:tree_nodes": "nodes of the radix tree (root included)",
           "kvlab:tree_tokens": "tokens the radix tree holds on the device",
           "kvlab:free_blocks": "free blocks in the pool", "kvlab:num_blocks": "blocks in the pool"}
_COUNTERS = {"kvlab:evicted_tokens": "tokens evicted from the radix tree",
             "kvlab:host_hit_tokens": "prompt tokens found on the host tier",
             "kvlab:disk_hit_tokens": "prompt tokens found on the disk tier"}


def engine_snapshot(engine, waiting_extra: int = 0) -> dict[str, float]:
    """The engine's gauges and cumulative counts now (call in the engine's thread)."""
    tree, alloc = engine.cache, engine.allocator
    rids = lambda seqs: len({s.request.rid for s in seqs})
    stats = getattr(engine.cache_manager, "tier_stats", None)
    return {"vllm:num_requests_running": rids(engine.running),
            "vllm:num_requests_waiting": rids(engine.waiting) + len(engine.pending) + waiting_extra,
            "vllm:kv_cache_usage_perc": alloc.num_used_blocks / engine.cache_manager.num_blocks,
            "kvlab:tree_nodes": tree.num_nodes if tree is not None else 0,
            "kvlab:tree_tokens": tree.total_size() if tree is not None else 0,
            "kvlab:free_blocks": alloc.num_free_blocks, "kvlab:num_blocks": engine.cache_manager.num_blocks,
            "kvlab:evicted_tokens": tree.stats.evicted_tokens if tree is not None else 0,
            "kvlab:host_hit_tokens": stats.host_hit_tokens if stats is not None else 0,
            "kvlab:disk_hit_tokens": stats.disk_hit_tokens if stats is not None else 0}


class _SnapshotCollector:
    """Yields the latest engine snapshot as gauges and counters (the loop replaces ``values``)."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.values: dict[str, float] = {}

    def collect(self):
        values = self.values                      # one dict, replaced whole by the engine thread
        for name, doc in _GAUGES.items():
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric([self.model_name], values.get(name, 0))
            yield g
        for name, doc in _COUNTERS.items():
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric([self.model_name], values.get(name, 0))
            yield c


class ServeMetrics:
    """The registry of one server and its instruments (thread-safe: prometheus_client locks)."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        self.engine = _SnapshotCollector(model_name)
        self.registry.register(self.engine)
        L, r = ["model_name"], self.registry
        self.prompt_tokens = Counter("vllm:prompt_tokens", "prompt tokens of admitted requests", L, registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "tokens generated and sent", L, registry=r)
        self.prefix_queries = Counter("vllm:prefix_cache_queries", "prompt tokens looked up in the radix tree", L,
                                      registry=r)
        self.prefix_hits = Counter("vllm:prefix_cache_hits", "prompt tokens found in the radix tree", L, registry=r)
        self.preemptions = Counter("vllm:num_preemptions", "requests preempted (recomputed later)", L, registry=r)
        self.prefill_computed = Counter("kvlab:prefill_computed_tokens", "prompt tokens run through the model", L,
                                        registry=r)
        self.success = Counter("kvlab:request_success", "requests finished, by finish reason",
                               L + ["finished_reason"], registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "time to first token", L, buckets=TTFT_BUCKETS,
                              registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "time between two tokens of a sample", L,
                             buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "arrival to last token", L, buckets=E2E_BUCKETS,
                             registry=r)

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return generate_latest(self.registry)
