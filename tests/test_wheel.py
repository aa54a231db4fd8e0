"""A non-editable install works outside the checkout (issue 14 item 6).

The wheel is built from a copy of the package's files (nothing is written into the checkout),
its file list is checked (kvlab/kernels as real files, the bundled model and tokenizer as package
data, nothing else of the repository), and it is installed with ``--no-deps`` into a fresh
virtual environment that sees this one's site-packages through a .pth file (so torch and the
rest are there, but not this checkout's editable kvlab). From another directory,
``load_bundled()`` and ``python -m kvlab generate`` (on the bundled model and on a saved random
checkpoint) then run on the installed copy.
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what the build needs: pyproject.toml names README.md; package-dir maps kvlab, kernels/, assets/model/
BUILD_INPUTS = ("pyproject.toml", "README.md", "kvlab", "kernels", "assets")
BUNDLED = ("config.json", "model.safetensors", "tokenizer.json")


def _run(cmd: list[str], cwd: Path, timeout: int = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in BUILD_INPUTS:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, symlinks=True, ignore=skip)   # kvlab/kernels stays a symlink
        else:
            shutil.copy2(p, src / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(tmp / "dist"), str(src)], cwd=tmp)
    (whl,) = (tmp / "dist").glob("kvlab-*.whl")
    return whl


def test_the_wheel_holds_the_package_the_kernels_and_the_bundled_model(wheel):
    with zipfile.ZipFile(wheel) as z:
        infos = {i.filename: i for i in z.infolist()}
    names = set(infos)
    tops = {n.split("/")[0] for n in names}
    assert tops == {"kvlab", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, tops
    kernels = {n for n in names if n.startswith("kvlab/kernels/")}
    assert {"kvlab/kernels/__init__.py", "kvlab/kernels/paged_decode.py", "kvlab/kernels/extend.py"} <= kernels
    for n in kernels:                                  # real files, not a link to ../kernels
        assert (infos[n].external_attr >> 16) & 0o170000 != 0o120000, n
        assert infos[n].file_size > 0, n
    for f in BUNDLED:
        info = infos[f"kvlab/assets/model/{f}"]
        assert info.file_size == (ROOT / "assets" / "model" / f).stat().st_size, f
    assert "kvlab/compute/loader.py" in names and "kvlab/__main__.py" in names
    assert not any(part in n for n in names for part in ("tests/", "bench/", "notebooks/", "scripts/", "__pycache__"))
    assert wheel.stat().st_size < 8_000_000            # the model is 5 MB; nothing else of size


def test_installed_wheel_loads_the_bundled_model_and_generates_from_elsewhere(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    py = venv / "bin" / "python"
    purelib = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=tmp_path).stdout.strip())
    # this environment's packages (torch, safetensors, tokenizers...) without processing its .pth files,
    # so the checkout's editable kvlab stays invisible
    (purelib / "_kvlab_test_parent_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
         cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import kvlab, kvlab.kernels, torch\n"
            "from kvlab.compute import generate, load_bundled\n"
            "from kvlab.compute.loader import ASSETS_MODEL_DIR\n"
            "model, tok = load_bundled()\n"
            "print(kvlab.__file__); print(kvlab.kernels.__file__); print(ASSETS_MODEL_DIR)\n"
            "print(len(generate(model, tok.encode('Return the'), 3, strategy='paged').tokens))\n")
    lines = _run([str(py), "-c", code], cwd=elsewhere).stdout.split()
    assert all(line.startswith(str(purelib)) for line in lines[:3]), lines   # the installed copy, not the checkout
    assert lines[2].endswith("kvlab/assets/model") and lines[3] == "3", lines
    for cmd in ([str(py), "-m", "kvlab"], [str(venv / "bin" / "kvlab")]):   # the module and the console script
        out = _run([*cmd, "generate", "--prompt", "Return the", "--max-tokens", "3"], cwd=elsewhere).stdout
        assert out.startswith("Return the") and "the bundled model: 4 layers" in out, out
        assert "2 x layers 4 x kv_heads 2 x head_dim 32 x tokens 4 x bytes 4 = 8,192 bytes" in out, out
    # and a checkpoint of the user's own: a random one saved here, read by the installed copy
    import torch

    from kvlab.compute import Llama, LlamaConfig, load_bundled_tokenizer, save_pretrained

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    save_pretrained(Llama(cfg), tmp_path / "ckpt", tokenizer=load_bundled_tokenizer())
    out = _run([str(py), "-m", "kvlab", "generate", "--model", str(tmp_path / "ckpt"), "--prompt", "def f(x):",
                "--max-tokens", "3", "--strategy", "contiguous"], cwd=elsewhere).stdout
    assert f"{tmp_path / 'ckpt'}: 2 layers, 4 query heads, 2 KV heads, head_dim 8" in out, out
