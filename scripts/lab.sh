#!/usr/bin/env bash
# `make lab`: set up (idempotent), then start JupyterLab on notebooks/ with the
# start-here lesson open. Prints the URL with its token. Ctrl-C stops it.
# PORT=8899 make lab   picks another port (default: 8888, or the next free one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
PORT="${PORT:-$($PY - <<'PYEOF'
import socket
for p in range(8888, 8988):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p)); print(p); break
        except OSError:
            continue
PYEOF
)}"
TOKEN="${KVLAB_TOKEN:-$($PY -c 'import secrets; print(secrets.token_hex(16))')}"
ROOT_FLAG=(); [[ $(id -u) -eq 0 ]] && ROOT_FLAG=(--allow-root)
URL="http://127.0.0.1:${PORT}/lab/tree/00_start_here.ipynb?token=${TOKEN}"
printf '\n  kvlab lessons: %s\n  (open it in your browser; Ctrl-C here stops JupyterLab)\n\n' "$URL"
cd notebooks
# The token goes through the environment (JupyterLab reads JUPYTER_TOKEN), never the command
# line, where every local user could read it in `ps`.
export JUPYTER_TOKEN="$TOKEN"
# The lessons' models are tiny: one CPU thread per kernel is fastest (see scripts/test.sh).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
exec ../.venv/bin/jupyter lab "${ROOT_FLAG[@]}" --no-browser --ip=127.0.0.1 --port="$PORT" \
  --ServerApp.root_dir="$PWD" --LabApp.default_url="/lab/tree/00_start_here.ipynb"
