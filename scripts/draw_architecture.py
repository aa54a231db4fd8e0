"""Draw kvlab's layers from the source: which folder imports which (docs/img/architecture.svg).

The picture is computed, not drawn by hand: every ``import`` at module level in kvlab/ is read
with ``ast`` and mapped to its layer (the folders of kvlab/); an arrow A -> B means some module
of A imports B. ``layer_imports()`` is also what tests/test_layers.py checks: no layer imports a
layer above it.

    .venv/bin/python scripts/draw_architecture.py          # writes docs/img/architecture.svg and .dot
    .venv/bin/python scripts/draw_architecture.py --print  # the edges as text
"""
from __future__ import annotations

import argparse
import ast
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "kvlab"

# bottom to top; a layer may import only the layers before it
LAYERS = ["memory", "reuse", "kernels", "compute", "sim", "lessons", "viz", "check"]
WHAT = {
    "memory": "block pool, block tables,\nBlockManager, contiguous arena,\nKV sizes, events",
    "reuse": "radix cache, eviction,\nblock-hash cache, CacheManager,\nscheduling order",
    "kernels": "Triton kernels +\ntorch references",
    "compute": "model, loader, KV tensors,\nModelRunner, Scheduler, Engine,\ngenerate",
    "sim": "serving at scale,\nsimulated",
    "lessons": "the notes'\nworked examples",
    "viz": "plotly, ipywidgets,\ngraphviz views",
    "check": "exercise checkers,\nself-test",
}


def _layer_of(module: str) -> str | None:
    """'kvlab.reuse.radix_cache' -> 'reuse'; None for kvlab's top-level modules and shims."""
    parts = module.split(".")
    if parts[0] != "kvlab" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def parse(path: Path) -> ast.Module:
    """The syntax tree of the file at ``path``, parsed once per text (tests/test_layers.py reads every
    module in ten rules): read it, never change it.

    >>> parse(PKG / "__init__.py") is parse(PKG / "__init__.py")
    True
    """
    return _parse_text(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1024)
def _parse_text(text: str) -> ast.Module:
    return ast.parse(text)


def resolve_import(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute module a ``from ... import`` in ``module`` names: 'kvlab.reuse.a' + ``from .b`` -> 'kvlab.reuse.b'."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def module_imports(top_level_only: bool = True) -> dict[str, set[str]]:
    """{module: the kvlab modules it imports}; ``top_level_only``: skip imports inside functions
    (a lazy import of a higher layer, such as the command line's ``simulate``, does not count)."""
    out: dict[str, set[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        if path.relative_to(PKG).parts[0] == "kernels":  # the kernels import nothing of kvlab
            continue
        mod = _module_name(path)
        tree = parse(path)
        nodes = list(tree.body) if top_level_only else list(ast.walk(tree))
        deps: set[str] = set()
        for n in nodes:
            if isinstance(n, (ast.If, ast.Try)) and top_level_only:  # imports guarded at module level
                nodes.extend(n.body + getattr(n, "orelse", []) + [h for hd in getattr(n, "handlers", []) for h in hd.body])
                continue
            if isinstance(n, ast.Import):
                deps.update(a.name for a in n.names if a.name.startswith("kvlab"))
            elif isinstance(n, ast.ImportFrom):
                target = resolve_import(mod, n, path.name == "__init__.py")
                if target.startswith("kvlab"):
                    deps.add(target)
                    if target in ("kvlab", "kvlab.check") or target.count(".") == 0:
                        deps.update(f"{target}.{a.name}" for a in n.names)
        out[mod] = deps
    return out


def layer_imports(top_level_only: bool = True) -> dict[tuple[str, str], list[str]]:
    """{(layer, imported layer): [the modules that do it]} over module-level imports (with
    ``top_level_only=False``, imports inside functions too)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for mod, deps in module_imports(top_level_only).items():
        src = _layer_of(mod)
        if src is None:
            continue
        for d in deps:
            dst = _layer_of(d)
            if dst is not None and dst != src:
                edges.setdefault((src, dst), []).append(mod)
    return edges


def upward_imports() -> list[str]:
    """Every import of a higher layer, at module level or inside a function (should be none)."""
    bad = []
    for (src, dst), mods in sorted(layer_imports(top_level_only=False).items()):
        if LAYERS.index(dst) > LAYERS.index(src):
            bad += [f"{m} ({src}) imports {dst}" for m in mods]
    return bad


def dot_source() -> str:
    lines = ["digraph kvlab {", '  rankdir=BT; node [shape=box, style="rounded,filled", fontname="Helvetica", '
             'fillcolor="#f4f4f4"]; edge [color="#777777"];',
             '  label="kvlab\'s layers, computed from the imports (A -> B: A imports B; dashed: only inside functions)"; labelloc=t;']
    for i, layer in enumerate(LAYERS):
        lines.append(f'  {layer} [label="kvlab.{layer}\\n{WHAT[layer]}", fillcolor="{"#dbe9f6" if i < 2 else "#f4f4f4"}"];')
    eager = layer_imports()
    for (src, dst) in sorted(layer_imports(top_level_only=False)):
        style = "" if (src, dst) in eager else ' [style=dashed, tooltip="imported inside functions only"]'
        lines.append(f"  {src} -> {dst}{style};")
    lines.append("}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--print", action="store_true", help="print the edges instead of drawing")
    a = p.parse_args(argv)
    if a.print:
        eager = layer_imports()
        for (src, dst), mods in sorted(layer_imports(top_level_only=False).items()):
            print(f"{src:8s} -> {dst:8s} ({len(mods)} module(s){'' if (src, dst) in eager else ', inside functions only'})")
        bad = upward_imports()
        print("upward imports:", bad or "none")
        return 1 if bad else 0
    import graphviz

    out = ROOT / "docs" / "img"
    out.mkdir(parents=True, exist_ok=True)
    src = dot_source()
    (out / "architecture.dot").write_text(src + "\n", encoding="utf-8")
    graphviz.Source(src).render(out / "architecture", format="svg", cleanup=True)
    print(f"wrote {out / 'architecture.svg'} and {out / 'architecture.dot'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
