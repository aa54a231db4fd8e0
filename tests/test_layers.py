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

MAX_LINES = 450


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
        body = ast.parse(path.read_text(encoding="utf-8")).body
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


def test_every_module_is_short_or_says_why():
    long = []
    for path in sorted((ROOT / "kvlab").rglob("*.py")):
        if path.relative_to(ROOT / "kvlab").parts[0] == "kernels":
            continue
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_LINES and "longer than" not in text.split('"""')[1]:
            long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert long == [], f"modules over {MAX_LINES} lines whose docstring does not say why they are longer than that"


def test_the_committed_picture_is_todays():
    """docs/img/architecture.dot (and its .svg) must be redrawn when the imports change:
    `.venv/bin/python scripts/draw_architecture.py`."""
    committed = (ROOT / "docs" / "img" / "architecture.dot").read_text(encoding="utf-8")
    assert committed.strip() == arch.dot_source().strip(), "run scripts/draw_architecture.py"


# Accesses to another module's private members that the lesson helpers' modules still make; the
# lead empties this list when kvlab/check and kvlab/viz are migrated (each entry: "path x._name").
PRIVATE_ACCESS_LEFT = {"kvlab/check/l09_at_scale.py pol._run_blocks"}
OUTSIDE = ("self", "cls", "sys", "os", "np", "torch", "tl", "triton")  # self/cls; and libraries' own names


def private_accesses(root: Path = ROOT) -> list[str]:
    """Every ``x._name`` in kvlab/ where ``x`` is not ``self``/``cls``/``super()`` and ``_name`` is not
    defined in the same file (a def, a class, or an attribute set on ``self``/``cls``)."""
    out = []
    for path in sorted((root / "kvlab").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("kvlab/kernels/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = {d.name for d in ast.walk(tree) if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        own |= {a.attr for a in ast.walk(tree) if isinstance(a, ast.Attribute) and isinstance(a.ctx, ast.Store)
                and isinstance(a.value, ast.Name) and a.value.id in ("self", "cls")}
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")):
                continue
            v = n.value
            if isinstance(v, ast.Name) and v.id in OUTSIDE or isinstance(v, ast.Call) and getattr(v.func, "id", "") == "super":
                continue
            if n.attr not in own:
                out.append((rel, n.lineno, ast.unparse(n)))
    return [f"{rel}:{line} {what}" for rel, line, what in sorted(out)]


def test_no_module_reaches_into_another_modules_private_members():
    """A path between modules has a public, documented name (the trusted twins included:
    ``BlockAllocator.touch``, ``RadixCache.insert_key``, ...); ``x._name`` from outside is a missing one."""
    found = [f for f in private_accesses() if "{} {}".format(f.split(":")[0], f.split(" ", 1)[1]) not in PRIVATE_ACCESS_LEFT]
    assert found == []


def test_the_private_access_scan_finds_a_reach_in(tmp_path):
    pkg = tmp_path / "kvlab"
    pkg.mkdir()
    (pkg / "a.py").write_text("class A:\n    def f(self, tree):\n        self._x = 1\n        tree._checkpoint('x')\n"
                              "        tree._protected = set()\n        return self._y, tree._x, super()._z\n")
    # a call and a write from outside are caught; self, super() and a name this file defines are not
    assert private_accesses(tmp_path) == ["kvlab/a.py:4 tree._checkpoint", "kvlab/a.py:5 tree._protected"]
