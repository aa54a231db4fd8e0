"""kvlab.viz: see every allocation, lookup and eviction. Rendering only reads state.

Views (each has a pure-data builder that tests check, and a picture built from it):
    memory_map_figure(snapshot)            the paged pool as a grid (12 to 4,096+ blocks): each block filled
                                           as far as it holds tokens, each holder's block table above it
                                           with an arrow into every block it holds (the radix tree too)
    animate_memory_map(snapshots, log)     plotly animation, one frame per event, captioned in words
    memory_map_stepper(snapshots, log)     the same in the stepper widget (frames numbered alike: step 3 / 16)
    StepperChoice({label: stepper})       toggle buttons above a stepper: each option a run of its own (lesson 06)
    memory_map_choice({label: run})       the same over recorded runs, one figure and caption height for all
    event_figure(snapshots, log, step)     one of those steps as a static figure (the stepper's colours)
    event_sentence(event, snapshot)        the caption of an event: one plain sentence
    pool_snapshot(allocator, tables)       a bare allocator's pool (e.g. under a RadixCache) as a snapshot
    TranslationWidget()                    pos -> logical block, offset -> table -> physical -> address
    ThesisWidget()                         lesson 00: a shared prefix on/off (the radix tree) and a position
                                           translated through R1's or R2's block table (the physical layer)
    decode_stepper(trace_decode(...), tok) lesson 01: one decode step a frame, no cache against the KV cache (which
                                           K/V rows each computes, writes and reads; the FLOPs so far)
    CostWidget(models)                     lesson 01: a context-length slider, naive vs cached FLOPs per step (log axes)
    CapacityWidget()                       lesson 02: model, KV number format, device, request length -> requests that fit
    ScenarioControl(scenarios, published)  lesson 09 appendix: a menu over simulated scenarios, every system's bar
                                           beside the baseline's and the published one
    PolicyWidget()                         lesson 03: the contiguous reservation policy and the paged block size
    BlockSizeControl(rows)                 lesson 04: the block size picked on the measured rows, empty slots
                                           against block-table lookups per request
    run_compare(trace) -> steps; compare_figure(step), animate_compare(steps), compare_stepper(trace)
                                           contiguous versus paged on one trace
    radix_tree_graph(state) / radix_graph_at(frames, step)   radix tree in graphviz (SVG)
    radix_request_frames(records) / radix_event_frames(RadixRecorder(cache)) / radix_stepper(frames)
    kernel_access_figure(snapshot, seq_id) / kernel_access_stepper(snapshot, seq_id)
                                           the order the paged decode kernel reads a sequence's blocks
    Stepper(frames, render)                prev / next / play / reset + caption over any frames
    ShuffleControl(q, k, v, table, n)      lesson 05: shuffle the blocks, choose split-K's programs; the kernel reruns
    SharingControl()                       lesson 06: n, beam width, new tokens, block size, prompt -> blocks saved, copies
    HitRateControl()                       lesson 08: pool size and eviction policy -> hit rate
    SchedulingControl()                    lesson 08: pool size and queue order -> hit rate (simulated)
    chat_demo(session=None)                lesson 07: a chat box on SmolLM2; each turn's tokens matched (green) or
                                           prefilled (blue), the radix tree growing, the pool filling, the TTFT
    serve_view: dashboard_figure(state) / dashboard_stepper(states, captions) / router_figure(views)
                                           lesson 12: a server's recorded dashboard and the router view (measured)
    classroom(True)                        for a 1280x720 projector: figures take the output width,
                                           large fonts, thick lines, bigger widget controls

Every figure's title says (simulated) or (measured).

Static fallback: with no widget front end (nbval, exported HTML, a plain Python shell),
views render their current frame as a static plotly figure or graphviz SVG. Force it
with ``static=True`` on a view or ``KVLAB_STATIC=1`` in the environment (CI and nbval
set it); force widgets with ``static=False`` or ``KVLAB_STATIC=0``. See kvlab.viz.display.
With ``KVLAB_STATIC=frames`` (the static site) steppers become players (kvlab.viz.flipbook) and
each lesson control becomes menus and sliders over a grid of states computed now
(kvlab.viz.explorer: a control's ``site_grid()`` names the grid).

CSS classes for browser tests (ipywidgets ``_dom_classes``; select with ``.kvlab-next``):
    controls:     kvlab-control (box) + kvlab-shuffle / kvlab-sharing / kvlab-hit-rate,
                  kvlab-control-caption, kvlab-figure; inputs kvlab-shuffle-button,
                  kvlab-unshuffle-button, kvlab-splits-slider, kvlab-samples-slider,
                  kvlab-beam-width-slider, kvlab-new-tokens-slider, kvlab-block-size-slider (06),
                  kvlab-prompt-len-slider, kvlab-pool-size-slider,
                  kvlab-policy-menu; lesson 11's kvlab-budget-sweep (kvlab-sweep-method,
                  kvlab-sweep-budget)
    stepper:      kvlab-stepper (box), kvlab-prev, kvlab-next, kvlab-play, kvlab-reset,
                  kvlab-step-slider, kvlab-caption, kvlab-error, kvlab-figure (plotly
                  view box) or kvlab-svg (graphviz view)
    translation:  kvlab-translation (box), kvlab-pos-slider, kvlab-block-size-slider,
                  kvlab-block-table (text field), kvlab-chain (the chain, HTML),
                  kvlab-translation-error, kvlab-figure
    Checked in JupyterLab 4 + Chromium (playwright): a Button carries the class itself
    (``button.kvlab-next``); the stepper's ``kvlab-play`` is on the box whose first button
    starts playing (``.kvlab-play button``); a slider's class is on its outer div: focus
    ``.kvlab-pos-slider .noUi-handle`` and press ArrowRight, or click its editable readout
    ``.kvlab-pos-slider .widget-readout``, type a number and press Enter. The stepper's
    slider and Play count from 1, like its caption ("step 2 / 12"). Plotly figures sit in
    Output widgets (``.kvlab-figure .js-plotly-plot``); radix trees are inline SVG
    (``.kvlab-svg svg``).

Imports plotly, ipywidgets and graphviz lazily where possible; the memory, compute and
simulation layers never import this package.

Example:
    >>> from kvlab.memory.block_manager import BlockManager
    >>> import kvlab.viz as viz
    >>> m = BlockManager(num_blocks=12, block_size=4, record=True)
    >>> _ = m.add_sequence("R1", 6); _ = m.fork("R1", "R2")
    >>> s = viz.memory_map_stepper(m.snapshots, m.log, static=True)   # one frame per event
    >>> len(s) == len(m.log), s.caption
    (True, 'R1 arrives with 6 tokens: it takes P0, P1 (P1 has 2 of 4 slots used)')
"""
from __future__ import annotations

from .iri_parser import defer_iri_parser

defer_iri_parser()   # before plotly (and through it jsonschema) is imported: see kvlab.viz.iri_parser

from .capacity_widget import CapacityWidget, capacity_figure, capacity_state, model_name  # lesson 02
from .compare import (
    CompareStep, animate_compare, compare_data, compare_figure, compare_stepper, growth_trace, notes_trace, run_compare,
)
from .block_tables import MapGeometry, map_geometry
from .captions import event_sentence
from .display import is_static, static_html
from .kernel_view import (
    BlockRead, kernel_access_data, kernel_access_figure, kernel_access_frames, kernel_access_order,
    kernel_access_stepper,
)
from .memory_animation import (
    MemoryMapView, animate_memory_map, event_figure, memory_frames, memory_map_choice, memory_map_stepper, step_caption,
)
from .memory_map import memory_map_data, memory_map_figure, pool_snapshot
from .pool_grid import GridLayout, grid_layout
from .palette import (
    FREE, HIGHLIGHT, HIT, MISS, EVICTED, REQUEST_COLORS, SHARED_OUTLINE, TREE, assign_colors, classroom,
    is_classroom, request_color, theme,
)
from .radix_frames import RadixRecorder, radix_event_frames, radix_request_frames
from .radix_state import RadixState, check_radix_snapshot
from .radix_view import radix_graph_at, radix_stepper, radix_tree_data, radix_tree_graph
from .cost_widget import CostModel, CostWidget, cost_figure, cost_state  # lesson 01
from .decode_view import decode_figure, decode_stepper, decode_view_data  # lesson 01
from .policy_widget import PolicyWidget, policy_state  # lesson 03
from .scenario_control import ScenarioControl  # lesson 09 appendix
from .stepper import Frame, Stepper, StepperChoice
from .thesis_widget import ThesisWidget, thesis_state  # lesson 00
from .control import LiveControl
from .chat_demo import chat_demo
from .eviction_view import HitRateControl, SchedulingControl
from .page_size_control import PageSizeControl  # lesson 07
from .block_size_control import BlockSizeControl  # lesson 04
from .sharing_view import SharingControl
from .shuffle_view import ShuffleControl
from .tier_view import TierRecorder, animate_tiers, lifecycle_graph, tier_map_figure, tier_stepper  # lesson 10
from .translate_widget import (
    TranslationWidget, chain_rows, parse_block_table, translation_chain, translation_figure,
    translation_figure_data,
)
from .display import use_plotly_config

use_plotly_config()  # no plotly logo, no "Share chart" (Plotly Cloud) button on any figure

__all__ = [
    "CapacityWidget", "capacity_figure", "capacity_state", "model_name",
    "CostModel", "CostWidget", "cost_figure", "cost_state",
    "decode_figure", "decode_stepper", "decode_view_data",
    "ThesisWidget", "thesis_state", "PolicyWidget", "policy_state", "ScenarioControl",
    "CompareStep", "animate_compare", "compare_data", "compare_figure", "compare_stepper", "growth_trace",
    "notes_trace", "run_compare",
    "MapGeometry", "map_geometry", "event_sentence", "step_caption",
    "is_static", "static_html",
    "BlockRead", "kernel_access_data", "kernel_access_figure", "kernel_access_frames", "kernel_access_order",
    "kernel_access_stepper",
    "GridLayout", "MemoryMapView", "animate_memory_map", "grid_layout", "memory_frames", "memory_map_data",
    "memory_map_figure", "memory_map_stepper", "memory_map_choice", "event_figure", "pool_snapshot",
    "FREE", "HIGHLIGHT", "HIT", "MISS", "EVICTED", "REQUEST_COLORS", "SHARED_OUTLINE", "TREE", "assign_colors",
    "classroom", "is_classroom", "request_color", "theme",
    "Frame", "Stepper", "StepperChoice", "LiveControl", "chat_demo", "HitRateControl", "SchedulingControl", "PageSizeControl", "BlockSizeControl", "SharingControl", "ShuffleControl",
    "RadixRecorder", "RadixState", "check_radix_snapshot", "radix_event_frames", "radix_graph_at",
    "radix_request_frames", "radix_stepper", "radix_tree_data", "radix_tree_graph",
    "TranslationWidget", "chain_rows", "parse_block_table", "translation_chain", "translation_figure",
    "translation_figure_data",
]
