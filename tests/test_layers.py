"""The shape of the package: layers that only look down, ordinary imports, one owner per table."""
from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import draw_architecture as arch  # noqa: E402

MAX_FUNCTION_LINES = 60  # memory, reuse, compute: split a long function, never a class
LONG_MODULE = 800  # a module longer than this says why in its docstring


def test_no_layer_imports_a_layer_above_it():
    assert arch.upward_imports() == []


def test_the_picture_is_computed_from_the_imports():
    src = arch.dot_source()
    assert "reuse -> memory;" in src and "compute -> reuse;" in src
    assert "memory ->" not in src  # the bottom layer imports nothing of kvlab


@pytest.mark.parametrize("name", ["kvlab.bench", "kvlab.scripts", "kvlab.tests", "kvlab.notebooks"])
def test_only_the_package_is_importable_under_kvlab(name):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


OLD_PATHS = ["kvlab.paged", "kvlab.radix", "kvlab.events", "kvlab.engine", "kvlab.model", "kvlab.kvspec",
             "kvlab.contiguous", "kvlab.examples", "kvlab.generate", "kvlab.kvstore", "kvlab.prefix_cache",
             "kvlab.schedule", "kvlab.tokenizer", "kvlab.sim.scheduler", "kvlab.check.memory", "kvlab.check.reuse"]


@pytest.mark.parametrize("name", OLD_PATHS)
def test_the_first_releases_module_paths_are_gone(name):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


def test_no_module_only_re_exports():
    """A module whose whole body is imports (and ``__all__``) is a shim: every name has one path.
    Package ``__init__`` files are the exception: they name a layer's public API."""
    shims = []
    for path in sorted((ROOT / "kvlab").rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py") or path.relative_to(ROOT / "kvlab").parts[0] == "kernels":
            continue
        body = arch.parse(path).body
        if all(isinstance(n, (ast.Import, ast.ImportFrom, ast.Expr)) or
               (isinstance(n, ast.Assign) and [getattr(t, "id", "") for t in n.targets] == ["__all__"]) for n in body):
            shims.append(str(path.relative_to(ROOT)))
    assert shims == []


def test_no_old_aliases():
    import kvlab.sim as sim
    import kvlab.sim.policies as policies
    import kvlab.sim.workloads as workloads

    for mod, name in [(sim, "Request"), (sim, "Seq"), (sim, "Group"), (sim, "ALIASES"), (policies, "Seq"),
                      (policies, "Group"), (policies, "ALIASES"), (workloads, "Request")]:
        assert not hasattr(mod, name), f"{mod.__name__}.{name} is an old alias"


def test_kernels_are_an_ordinary_import_and_no_path_tricks():
    init = (ROOT / "kvlab" / "__init__.py").read_text(encoding="utf-8")
    assert "__path__" not in init
    link = ROOT / "kvlab" / "kernels"
    assert link.is_symlink() and link.resolve() == (ROOT / "kernels").resolve()


def test_no_import_circle_between_the_command_line_and_the_simulator():
    for path in (ROOT / "kvlab" / "sim").rglob("*.py"):
        assert "__main__" not in path.read_text(encoding="utf-8"), f"{path} touches kvlab.__main__"
    code = "import sys, kvlab.__main__; assert 'kvlab.sim' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "ok", out.stderr


def test_check_loads_its_checker_modules_explicitly():
    init = (ROOT / "kvlab" / "check" / "__init__.py").read_text(encoding="utf-8")
    assert "pkgutil" not in init and "def __getattr__" not in init


def test_only_the_memory_layer_writes_block_tables():
    pattern = re.compile(r"\.block_ids(\[[^]]*\])? *(=(?!=)|\+=)|\.block_ids\.(append|extend|pop|clear|insert)\(|"
                         r"\.num_tokens *(=(?!=)|\+=|-=)")
    bad = []
    for path in sorted((ROOT / "kvlab").rglob("*.py")):
        rel = path.relative_to(ROOT / "kvlab")
        if rel.parts[0] in ("memory", "kernels"):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line) and "self.num_tokens" not in line:
                bad.append(f"{rel}:{i}: {line.strip()}")
    assert bad == [], "only kvlab.memory.block_manager.BlockManager may change a block table"


def long_functions(root: Path = ROOT) -> list[str]:
    """Functions and methods over MAX_FUNCTION_LINES lines (docstring included) in the three core layers."""
    out = []
    for layer in ("memory", "reuse", "compute"):
        for path in sorted((root / "kvlab" / layer).glob("*.py")):
            for n in ast.walk(arch.parse(path)):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES:
                    out.append(f"{path.relative_to(root).as_posix()}:{n.lineno} {n.name}: {n.end_lineno - n.lineno + 1} lines")
    return out


def test_no_function_in_the_core_layers_is_over_60_lines():
    """One class, one file (issue 31): classes are not split by size; long functions are."""
    assert long_functions() == [], f"functions over {MAX_FUNCTION_LINES} lines: split them"


def test_the_function_size_rule_finds_a_long_function(tmp_path):
    (tmp_path / "kvlab" / "reuse").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "kvlab" / "reuse" / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions(tmp_path) == [f"kvlab/reuse/m.py:5 long: {MAX_FUNCTION_LINES + 1} lines"]


# Issue 31 item 2: one public name per operation: at most 16 public methods (properties included)
# for each of these. Values that carry their checks replace the trusted twins: a RadixKey (tokens),
# a BlockTable and HeldBlocks (block ids) are taken without checking them again.
PUBLIC_METHOD_TARGET = 16
PUBLIC_METHOD_CEILING = {
    ("kvlab/memory/block_manager.py", "BlockManager"): 13,   # ceilings: today's counts, only going down
    ("kvlab/reuse/radix_cache.py", "RadixCache"): 16,
    ("kvlab/reuse/cache_manager.py", "CacheManager"): 14,
}


def public_methods(path: Path, cls: str) -> list[str]:
    """The public methods and properties ``cls`` defines in ``path`` (inherited ones not counted)."""
    for n in arch.parse(path).body:
        if isinstance(n, ast.ClassDef) and n.name == cls:
            return [f.name for f in n.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and not f.name.startswith("_")]
    raise AssertionError(f"{cls} is not defined in {path}")


@pytest.mark.parametrize("where", sorted(PUBLIC_METHOD_CEILING), ids=lambda w: w[1])
def test_public_methods_per_class_do_not_grow(where):
    names = public_methods(ROOT / where[0], where[1])
    assert len(names) <= PUBLIC_METHOD_CEILING[where], (
        f"{where[1]} has {len(names)} public methods (ceiling {PUBLIC_METHOD_CEILING[where]}, target "
        f"{PUBLIC_METHOD_TARGET}): one name per operation; {names}")


def test_the_public_method_count_sees_methods_and_properties(tmp_path):
    src = ("class C:\n    def a(self): pass\n    @property\n    def b(self): return 1\n"
           "    def _c(self): pass\n    def __len__(self): return 0\n")
    (tmp_path / "m.py").write_text(src)
    assert public_methods(tmp_path / "m.py", "C") == ["a", "b"]


def test_no_class_is_split_into_mixins():
    """A class is read whole: no mixin classes whose only reason is file size (SGLang's radix_cache.py
    and vLLM's block_pool.py are one file each)."""
    mixins = []
    for path in sorted((ROOT / "kvlab").rglob("*.py")):
        for n in ast.walk(arch.parse(path)):
            if isinstance(n, ast.ClassDef) and ("mixin" in (ast.get_docstring(n) or "").lower()):
                mixins.append(f"{path.relative_to(ROOT).as_posix()}: {n.name}")
    assert mixins == [], "classes documented as mixins (put the methods in the class they belong to)"


def test_a_long_module_says_why():
    long = []
    for path in sorted((ROOT / "kvlab").rglob("*.py")):
        if path.relative_to(ROOT / "kvlab").parts[0] == "kernels":
            continue
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > LONG_MODULE and "longer than" not in (ast.get_docstring(arch.parse(path)) or ""):
            long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert long == [], f"modules over {LONG_MODULE} lines whose docstring does not say why they are longer than that"


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def re_exports(root: Path = ROOT) -> list[str]:
    """Names that a module other than a package ``__init__`` lists in ``__all__`` but imports from another
    kvlab module, and names imported from such a module instead of where they are defined."""
    found, exported = [], set()
    parsed = {}
    for path in sorted((root / "kvlab").rglob("*.py")):
        if path.relative_to(root / "kvlab").parts[0] == "kernels":
            continue
        parsed[path] = (_module_name(root, path), arch.parse(path))
    for path, (mod, tree) in parsed.items():
        if path.name == "__init__.py":
            continue
        names = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                      and any(getattr(t, "id", "") == "__all__" for t in n.targets)), [])
        for n in tree.body:
            if isinstance(n, ast.ImportFrom) and arch.resolve_import(mod, n, False).startswith("kvlab"):
                for a in n.names:
                    if (a.asname or a.name) in names:
                        found.append(f"{path.relative_to(root).as_posix()}: __all__ re-exports {a.name}")
                        exported.add((mod, a.asname or a.name))
                    else:
                        exported.add((mod, "?" + (a.asname or a.name)))  # imported for its own use
    for path, (mod, tree) in parsed.items():
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom):
                src = arch.resolve_import(mod, n, path.name == "__init__.py")
                for a in n.names:
                    if (src, "?" + a.name) in exported:
                        found.append(f"{path.relative_to(root).as_posix()}:{n.lineno} imports {a.name} from {src}, "
                                     "which only imports it")
    return found


def test_no_module_re_exports_a_name():
    """Every name has one import path: where it is defined, or its layer's ``__init__`` (issue 31 item 4)."""
    assert re_exports() == []


def test_the_re_export_rule_finds_both_kinds(tmp_path):
    pkg = tmp_path / "kvlab" / "reuse"
    pkg.mkdir(parents=True)
    (tmp_path / "kvlab" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .b import Thing\n")
    (pkg / "a.py").write_text("class Thing:\n    pass\n")
    (pkg / "b.py").write_text('from .a import Thing\n\n__all__ = ["Thing", "use"]\n\n\ndef use():\n    return Thing()\n')
    (pkg / "c.py").write_text("from .b import Thing\n")
    got = re_exports(tmp_path)
    assert got[0] == "kvlab/reuse/b.py: __all__ re-exports Thing" and len(got) == 1, got
    (pkg / "b.py").write_text("from .a import Thing\n\n\ndef use():\n    return Thing()\n")
    assert re_exports(tmp_path) == ["kvlab/reuse/__init__.py:1 imports Thing from kvlab.reuse.b, which only imports it",
                                    "kvlab/reuse/c.py:1 imports Thing from kvlab.reuse.b, which only imports it"]


def test_the_committed_picture_is_todays():
    """docs/img/architecture.dot (and its .svg) must be redrawn when the imports change:
    `.venv/bin/python scripts/draw_architecture.py`."""
    committed = (ROOT / "docs" / "img" / "architecture.dot").read_text(encoding="utf-8")
    assert committed.strip() == arch.dot_source().strip(), "run scripts/draw_architecture.py"


OUTSIDE = ("self", "cls", "sys", "os", "np", "torch", "tl", "triton")  # self/cls; and libraries' own names
# underscored attributes that belong to a library's objects, not to a kvlab module: argparse keeps a
# parser's arguments only in ``_actions`` (kvlab.serve.router reads the router's flags from it);
# ipywidgets keeps a widget's CSS classes in the ``_dom_classes`` trait
LIBRARY_ATTRS = ("_actions", "_dom_classes")


def private_accesses(root: Path = ROOT) -> list[str]:
    """Every ``x._name`` in kvlab/ where ``x`` is not ``self``/``cls``/``super()`` and ``_name`` is not
    defined in the same file (a def, a class, or an attribute set on ``self``/``cls``)."""
    out = []
    for path in sorted((root / "kvlab").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("kvlab/kernels/"):
            continue
        tree = arch.parse(path)
        own = {d.name for d in ast.walk(tree) if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        own |= {a.attr for a in ast.walk(tree) if isinstance(a, ast.Attribute) and isinstance(a.ctx, ast.Store)
                and isinstance(a.value, ast.Name) and a.value.id in ("self", "cls")}
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")):
                continue
            if n.attr in LIBRARY_ATTRS:
                continue
            v = n.value
            if isinstance(v, ast.Name) and v.id in OUTSIDE or isinstance(v, ast.Call) and getattr(v.func, "id", "") == "super":
                continue
            if n.attr not in own:
                out.append((rel, n.lineno, ast.unparse(n)))
    return [f"{rel}:{line} {what}" for rel, line, what in sorted(out)]


def test_no_module_reaches_into_another_modules_private_members():
    """A path between modules has a public, documented name (the trusted twins included:
    ``BlockAllocator.touch``, ``BlockManager.adopt``'s ``HeldBlocks``, ...); ``x._name`` from outside is a missing one."""
    assert private_accesses() == []


def test_the_private_access_scan_finds_a_reach_in(tmp_path):
    pkg = tmp_path / "kvlab"
    pkg.mkdir()
    (pkg / "a.py").write_text("class A:\n    def f(self, tree):\n        self._x = 1\n        tree._checkpoint('x')\n"
                              "        tree._protected = set()\n        return self._y, tree._x, super()._z\n")
    # a call and a write from outside are caught; self, super() and a name this file defines are not
    assert private_accesses(tmp_path) == ["kvlab/a.py:4 tree._checkpoint", "kvlab/a.py:5 tree._protected"]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the kvlab modules it imports, anywhere in the file (a function-level import
    counts: it holds a circle together as well as a top-level one). A submodule importing its own
    package (``from . import x`` resolved to the package) is left out: that is the package's API."""
    mods = {}
    for path in (root / "kvlab").rglob("*.py"):
        rel = path.relative_to(root)
        if rel.parts[1] == "kernels":
            continue
        name = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        mods[name] = path
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        deps = set()
        for n in ast.walk(arch.parse(path)):
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    parts = parts[:len(parts) - (n.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in n.names]
            else:
                continue
            deps |= {t for t in targets if t in mods and t != mod and not mod.startswith(t + ".")}
        graph[mod] = deps
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_anywhere_in_the_package():
    """Issue 23 item 5: a circle held together by a late (function-level) import is still a circle:
    one concept split in two files. Each such pair now has a lower module both import."""
    assert import_circles(import_graph()) == []


def test_the_circle_finder_finds_a_late_import_circle(tmp_path):
    pkg = tmp_path / "kvlab"
    (pkg / "viz").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "viz" / "__init__.py").write_text("")
    (pkg / "viz" / "a.py").write_text("from .b import f\n")
    (pkg / "viz" / "b.py").write_text("def f():\n    from .a import g\n")
    assert import_circles(import_graph(tmp_path)) == [["kvlab.viz.a", "kvlab.viz.b"]]
