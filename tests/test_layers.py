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
