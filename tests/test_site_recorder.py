"""tests/site_recorder.py in a real kernel: a drawing cell forks only when it asks for KVLAB_STATIC,
and its record is what the static site must show (the shadow of what it showed before it asked,
then the rest in ``frames`` mode); a cell that never asks is its own record; a cell that asks while
a thread of the lesson's runs is "unsafe" (lesson 12's servers)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest

import nbclient  # installed by the set-up: a missing one fails
TESTS = Path(__file__).resolve().parent

PLAIN = "print('plain')\nx = 41"                                    # never asks
ASKS = ("import os\nprint('before it asks')\nmode = os.environ.get('KVLAB_STATIC', 'live')\nprint(mode)\n"
        "display({'text/html': f'<b>{mode}</b>'}, raw=True)\nx + 1")
FAILS = "print('one line')\nraise ValueError('planted')"
SERVER_SETUP = ("import socket, threading\nstop = threading.Event()\nmine, theirs = socket.socketpair()\n"
                "served = threading.Thread(target=stop.wait, name='kvlab-http')\nserved.start()")   # kvlab.serve's name
ASKS_BESIDE_SERVER = ("mode = os.environ.get('KVLAB_STATIC', 'live')\n"
                      "try:\n    mine.send(b'x'); print(mode, 'talked to the socket')\n"
                      "except OSError as e:\n    print(mode, 'no socket:', type(e).__name__)")
THREAD = "server = threading.Thread(target=stop.wait, name='server')\nserver.start()"    # a thread of the lesson's own
QUIET_WITH_THREAD = "print('a thread runs, this cell does not ask')"
ASKS_WITH_THREAD = "print(os.environ.get('KVLAB_STATIC', 'live'))"
NOT_DRAWN = "print('not drawn:', os.environ.get('KVLAB_STATIC', 'live'))"


def _run(tmp_path: Path) -> tuple[nbformat.NotebookNode, list[dict], list[dict]]:
    out = tmp_path / "frames"
    drawn = [PLAIN, ASKS, FAILS, ASKS_BESIDE_SERVER, QUIET_WITH_THREAD, ASKS_WITH_THREAD]
    cells = [f"import sys; sys.path.insert(0, {str(TESTS)!r}); import site_recorder as _kv_rec; "
             f"_kv_rec.start({str(out)!r}, {drawn!r}); del _kv_rec",
             PLAIN, ASKS, NOT_DRAWN, FAILS, SERVER_SETUP, ASKS_BESIDE_SERVER, THREAD, QUIET_WITH_THREAD,
             ASKS_WITH_THREAD,
             "stop.set(); server.join(); served.join()\nimport site_recorder as _kv_rec; print(_kv_rec.stop())"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env = {k: v for k, v in os.environ.items() if k != "KVLAB_STATIC"}
    nbclient.NotebookClient(nb, timeout=60, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    records = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    return nb, records, json.loads((out / "cells.timing").read_text())


def _texts(outputs: list[dict]) -> list[str]:
    """Each output's text; consecutive stream outputs of one stream joined, as the notebook shows them
    (a kernel may send print's "6" and its newline as two messages: a fresh-clone run did)."""
    texts: list[str] = []
    for i, o in enumerate(outputs):
        text = (o.get("text") or o.get("data", {}).get("text/html") or o.get("data", {}).get("text/plain")
                or f"{o.get('ename')}: {o.get('evalue')}")
        prev = outputs[i - 1] if i else None
        if prev is not None and o.get("output_type") == prev.get("output_type") == "stream" \
                and o.get("name") == prev.get("name"):
            texts[-1] += text
        else:
            texts.append(text)
    return texts


@pytest.mark.slow
def test_only_a_cell_that_asks_forks_and_its_record_is_the_sites(tmp_path, monkeypatch):
    monkeypatch.delenv("KVLAB_STATIC", raising=False)
    nb, records, timing = _run(tmp_path)
    assert len(records) == 6, records
    plain, asks, fails, beside_server, quiet, unsafe = records
    assert _texts(plain["outputs"]) == ["plain\n"]                               # its own outputs, no fork
    assert _texts(asks["outputs"]) == ["before it asks\nframes\n", "<b>frames</b>", "42"]   # shadow, then frames mode
    assert _texts(nb.cells[2].outputs) == ["before it asks\nlive\n", "<b>live</b>", "42"]   # the student's kernel: live
    assert _texts(nb.cells[3].outputs) == ["not drawn: live\n"]                          # not drawn: never forks
    assert _texts(fails["outputs"]) == ["one line\n", "ValueError: planted"]
    assert _texts(nb.cells[6].outputs) == ["live talked to the socket\n"]           # the parent: its sockets work
    assert _texts(beside_server["outputs"]) == ["frames no socket: OSError\n"]      # beside kvlab's server: forked, no socket
    assert _texts(quiet["outputs"]) == ["a thread runs, this cell does not ask\n"]   # a thread, but no fork needed
    assert "unsafe" in unsafe and "server" in unsafe["unsafe"]
    assert sum("child_cpu" in t for t in timing) == 2, timing             # two children: the cells that could ask
    assert _texts(nb.cells[-1].outputs) == ["6\n"]                               # stop(): 6 drawing cells run
