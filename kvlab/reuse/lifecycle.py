"""The lifecycle of a KV block, defined once: its states, the legal edges, and the tracker that emits them.

Three small state machines, one per kind of thing whose state changes (``MACHINES``):

``device``: one block of the device (GPU) pool, seen by the cache manager::

    free ──allocate──▶ allocated ──cache (table runs on)──▶ locked ◀──match──┐
      ▲                  │  └──cache (table finished)──▶ cached ──unlock────┘
      │                  └──free (abort, duplicate, partial tail)──▶ free
      ├──────────evict (dropped, or kept on the host)──── cached
      └──▶ loading ──copy done──▶ locked | cached      (load_back from host or disk)

``host``: one block of the host pool (pinned DRAM): ``free -> writing`` (a device-to-host copy
is queued into it) ``-> backup`` (the node is on both tiers) ``-> host`` (its device copy was
evicted) ``-> backup`` (loaded back) ... ``-> free`` (host eviction: dropped, or saved to disk).

``node``: where a radix node's KV lives (its *placement*): ``new -> device`` (insert),
``device -> both`` (backed up: write_through, selective, or write_back on eviction),
``both -> host`` (device copy evicted), ``host -> both`` (loaded back, or recomputed),
``host -> disk`` (host eviction with a storage tier), ``disk -> device`` (loaded back from
disk, or recomputed), ``* -> evicted`` (gone for good; a disk chunk that is missing or corrupt
is a miss). A split creates a node in its old half's state (``new -> *``).

A **locked** node is a device-resident one some running request reads (its blocks are
``locked``); a lock never holds a node that is not on the device.

Every transition is one event ``log.record("transition", seq_id, block_ids, machine=...,
src=..., dst=..., cause=..., node=...)`` in the run's event log. :class:`LifecycleTracker`
emits them: node transitions where the hierarchical tree changes a placement, block transitions
by comparing each pool's states at the checkpoints the cache manager marks (after every step
of the request cycle, so no state is skipped). :func:`replay` rebuilds the states from a log and
lists any transition that is not a legal edge (the property tests run it on random workloads).

Mirrors no single SGLang file: SGLang's ``TreeNode`` keeps ``value`` / ``host_value`` /
``loading`` / ``backuped`` / ``evicted`` flags (``mem_cache/hiradix_cache.py``); here they are
named states with a table of legal edges.

Example:
    >>> is_legal("device", "cached", "locked"), is_legal("device", "locked", "free")
    (True, False)
    >>> from kvlab.memory.events import EventLog
    >>> log = EventLog()
    >>> t = LifecycleTracker(log, num_device_blocks=2)
    >>> t.observe("device", ["allocated", "free"], cause="admit", seq_id="R1")
    >>> t.observe("device", ["cached", "free"], cause="cache_finished_req", seq_id="R1")
    >>> [(e.detail["src"], e.detail["dst"], e.block_ids) for e in log]
    [('free', 'allocated', (0,)), ('allocated', 'cached', (0,))]
    >>> replay(log).illegal
    []
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ..memory.events import Event, EventLog

__all__ = ["DEVICE_STATES", "HOST_STATES", "NODE_STATES", "MACHINES", "LEGAL_EDGES", "is_legal",
           "transition_table", "LifecycleTracker", "Replay", "replay"]

DEVICE_STATES = ("free", "allocated", "cached", "locked", "loading")
HOST_STATES = ("free", "writing", "backup", "host")
NODE_STATES = ("new", "device", "both", "host", "disk", "evicted")
MACHINES = {"device": DEVICE_STATES, "host": HOST_STATES, "node": NODE_STATES}

# (src, dst) -> what makes it happen. The one definition of what may happen to a KV block.
LEGAL_EDGES: dict[str, dict[tuple[str, str], str]] = {
    "device": {
        ("free", "allocated"): "a block table takes it (admit, append, copy-on-write): its KV is being written",
        ("allocated", "free"): "the table lets it go uncached (abort, a duplicate of cached tokens, the partial tail)",
        ("allocated", "locked"): "cached while its table still runs (cache_unfinished_req)",
        ("allocated", "cached"): "cached as its table leaves (cache_finished_req)",
        ("cached", "locked"): "a new request matches it",
        ("locked", "cached"): "the last request reading it leaves",
        ("cached", "free"): "evicted (dropped for good, or its copy kept on the host)",
        ("free", "loading"): "load_back: allocated to receive a copy from the host or the disk",
        ("loading", "locked"): "the copy ran; a running request reads it",
        ("loading", "cached"): "the copy ran; nobody reads it yet",
        ("loading", "free"): "evicted before its copy ran (the copy is wasted)",
    },
    "host": {
        ("free", "writing"): "a device-to-host copy is queued into it (write_through, selective, write_back)",
        ("writing", "backup"): "the copy ran; the node is on both tiers",
        ("writing", "host"): "the copy ran after the device copy was evicted (write_back)",
        ("writing", "free"): "host eviction before the copy ran",
        ("backup", "host"): "the device copy was evicted; the host holds the only copy",
        ("host", "backup"): "loaded back (or recomputed) onto the device",
        ("host", "free"): "host eviction: dropped for good, or saved to disk first",
    },
    "node": {
        ("new", "device"): "insert: a request's computed pages are cached",
        ("new", "both"): "split of a node on both tiers",
        ("new", "host"): "split of a host-only node",
        ("new", "disk"): "split of a disk-only node, or pages found in storage beyond the tree (a restart, another engine)",
        ("device", "both"): "backed up to the host (write_through, selective after enough hits, write_back on eviction)",
        ("both", "host"): "its device copy was evicted; the host copy stays",
        ("host", "both"): "loaded back onto the device on a hit (or recomputed)",
        ("host", "disk"): "host eviction with a storage tier: saved to disk",
        ("disk", "device"): "loaded back from disk on a hit (or recomputed)",
        ("device", "evicted"): "evicted from the device with no copy elsewhere",
        ("host", "evicted"): "host eviction without a storage tier (or dropped with its parent)",
        ("disk", "evicted"): "a disk miss (chunk missing or corrupt), or dropped with its parent",
    },
}


def is_legal(machine: str, src: str, dst: str) -> bool:
    """Whether ``src -> dst`` is an edge of ``machine`` ("device", "host" or "node")."""
    if machine not in LEGAL_EDGES:
        raise ValueError(f"unknown machine {machine!r}; choose one of {sorted(LEGAL_EDGES)}")
    return (src, dst) in LEGAL_EDGES[machine]


def transition_table(machine: str) -> list[tuple[str, str, str]]:
    """The legal edges of ``machine`` as rows ``(src, dst, what makes it happen)``.

    Example: ``transition_table("node")[0] -> ('new', 'device', 'insert: a request's ...')``.
    """
    if machine not in LEGAL_EDGES:
        raise ValueError(f"unknown machine {machine!r}; choose one of {sorted(LEGAL_EDGES)}")
    return [(s, d, why) for (s, d), why in LEGAL_EDGES[machine].items()]


@dataclass
class LifecycleTracker:
    """The current state of every device block, host block and node, and the events that move them.

    ``observe(machine, states, cause)``: a pool's states now (one per block); every block whose
    state differs is one transition (grouped: one event per ``(src, dst)``). ``node(id, dst,
    cause)``: one node changes placement. An edge that is not legal is kept in ``illegal`` (the
    cache manager's ``check_integrity`` asserts there is none).
    """

    log: EventLog
    num_device_blocks: int
    num_host_blocks: int = 0
    device: list[str] = field(init=False)
    host: list[str] = field(init=False)
    nodes: dict[int, str] = field(default_factory=dict)
    illegal: list[tuple[str, str, str, str]] = field(default_factory=list)
    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.device = ["free"] * self.num_device_blocks
        self.host = ["free"] * self.num_host_blocks

    def _count(self, machine: str, src: str, dst: str, cause: str, n: int) -> None:
        key = (machine, src, dst)
        self.counts[key] = self.counts.get(key, 0) + n
        if (src, dst) not in LEGAL_EDGES[machine]:
            self.illegal.append((machine, src, dst, cause))

    def observe(self, machine: str, states: Sequence[str], cause: str, seq_id: str | None = None) -> None:
        """Emit the transitions that take the ``machine`` pool ("device" or "host") to ``states``."""
        cur = self.device if machine == "device" else self.host
        if len(states) != len(cur):
            raise ValueError(f"{machine} pool has {len(cur)} blocks, got {len(states)} states")
        moves: dict[tuple[str, str], list[int]] = {}
        for b, (old, new) in enumerate(zip(cur, states)):
            if old != new:
                moves.setdefault((old, new), []).append(b)
                cur[b] = new
        for (src, dst), ids in moves.items():
            self._count(machine, src, dst, cause, len(ids))
            self.log.record("transition", seq_id, ids, machine=machine, src=src, dst=dst, cause=cause)

    def node(self, node_id: int, dst: str, cause: str, block_ids: Iterable[int] = (), seq_id: str | None = None) -> None:
        """Node ``node_id`` moves to placement ``dst`` (from "new" the first time it is seen)."""
        src = self.nodes.get(node_id, "new")
        if src == dst:
            return
        self._count("node", src, dst, cause, 1)
        if dst == "evicted":
            self.nodes.pop(node_id, None)
        else:
            self.nodes[node_id] = dst
        self.log.record("transition", seq_id, list(block_ids), machine="node", src=src, dst=dst, cause=cause,
                        node=node_id)


@dataclass
class Replay:
    """States rebuilt from a log's transition events (see :func:`replay`)."""

    device: dict[int, str]
    host: dict[int, str]
    nodes: dict[int, str]
    illegal: list[str]
    num_transitions: int


def replay(log: EventLog | Iterable[Event]) -> Replay:
    """Replay every ``transition`` event of ``log``: the states it leads to, and each event that is
    not a legal edge or whose ``src`` is not the state its block or node was in (a skipped step).

    Blocks and nodes not yet named are ``free`` / ``new``; a node that reaches ``evicted`` leaves.
    """
    dev: dict[int, str] = {}
    host: dict[int, str] = {}
    nodes: dict[int, str] = {}
    bad: list[str] = []
    n = 0
    for e in log:
        if e.kind != "transition":
            continue
        n += 1
        d = e.detail
        m, src, dst = d["machine"], d["src"], d["dst"]
        if not is_legal(m, src, dst):
            bad.append(f"#{e.step} {m} {src} -> {dst} ({d.get('cause')}): not an edge")
        if m == "node":
            nid = d["node"]
            if nodes.get(nid, "new") != src:
                bad.append(f"#{e.step} node {nid} was {nodes.get(nid, 'new')}, event says {src}")
            if dst == "evicted":
                nodes.pop(nid, None)
            else:
                nodes[nid] = dst
            continue
        pool = dev if m == "device" else host
        for b in e.block_ids:
            if pool.get(b, "free") != src:
                bad.append(f"#{e.step} {m} block {b} was {pool.get(b, 'free')}, event says {src}")
            pool[b] = dst
    return Replay({b: s for b, s in dev.items() if s != "free"}, {b: s for b, s in host.items() if s != "free"},
                  nodes, bad, n)
