"""The set-up files agree with each other and with the README."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _norm(req: str) -> tuple[str, str]:
    req = req.split(";")[0].strip()
    m = re.match(r"([A-Za-z0-9_.\-]+)\s*(.*)", req)
    assert m, req
    return m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")


def test_environment_yml_matches_pyproject():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    want = {_norm(r) for r in py["dependencies"]}
    for extra in ("lab", "serve", "test"):
        want |= {_norm(r) for r in py["optional-dependencies"][extra]}
    pip_lines, in_pip = [], False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if re.match(r"^\s*- pip:\s*$", line):
            in_pip = True
            continue
        if in_pip and re.match(r"^\s*- ", line):
            pip_lines.append(line.strip()[2:].strip())
    got = {_norm(r) for r in pip_lines}
    assert got == want, f"only in environment.yml: {sorted(got - want)}; only in pyproject: {sorted(want - got)}"
    assert re.search(r"^\s*- graphviz\s*$", (ROOT / "environment.yml").read_text(), re.M), "conda graphviz (brings dot)"


def test_constraints_only_pin_declared_packages():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_norm(r)[0] for r in py["dependencies"]}
    for extra in py["optional-dependencies"].values():
        declared |= {_norm(r)[0] for r in extra}
    for line in (ROOT / "requirements/constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert _norm(line)[0] in declared, line


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme
    ci = [ln for ln in (ROOT / ".ci/run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert ci[-1].strip() == "make test"


def test_the_lab_token_never_goes_on_a_command_line():
    """Issue 15 item 10: `ps` shows every process's arguments to every local user."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for f in (root / "scripts" / "lab.sh", root / "tests" / "browser_utils.py"):  # the browser tests' server
        text = f.read_text(encoding="utf-8")
        assert "IdentityProvider.token" not in text and "ServerApp.token" not in text, f
        assert "JUPYTER_TOKEN" in text, f


def test_setup_takes_the_cpu_torch_index_when_there_is_no_gpu_and_says_which_build():
    """Issue 15: a plain `pip install torch==2.13.0` on a stock laptop brings the CUDA build."""
    from pathlib import Path

    sh = (Path(__file__).resolve().parents[1] / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert "https://download.pytorch.org/whl/cpu" in sh and "KVLAB_TORCH_INDEX_URL" in sh
    assert "timeout=5" in sh and "--index-url" in sh  # probed with a short timeout, then used
    assert "did not answer" in sh  # ... or a one-line warning and the default index
    assert "torch.version.cuda is None" in sh  # the build actually installed is printed
