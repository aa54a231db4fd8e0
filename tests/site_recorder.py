"""In a lesson's kernel (the browser test's): the static site's outputs of every drawing cell,
recorded while the lesson runs live, so the lesson runs once for both (issue 35).

:func:`start` registers two IPython hooks and watches ``os.environ``. While a cell whose source is
one of ``drawn`` (the cells whose stored outputs are drawn: tests/test_browser.py
``_redrawn_cells``) runs, what it shows is also kept here (a shadow of its outputs). The first
time such a cell asks for ``KVLAB_STATIC`` (kvlab.viz's ``is_static``/``static_frames``, or any
other read of the variable), the kernel forks there. The child is the same kernel at the same
point, byte for byte: it answers ``frames`` (figures static, every stepper a player: what
``scripts/build_site.py`` renders), runs the rest of the cell with its outputs captured after the
shadow's (what the cell showed before it asked), writes them to ``<out>/<seq>.json`` and exits
without a word to the front end. The parent answers as the student's kernel does and goes on with
the lesson while the child records (at most ``MAX_CHILDREN`` at once; :func:`stop` waits for them
all). A cell that never asks shows the same outputs in both modes: its shadow is its record, and
nothing forks (so a cell's work before it draws is done once, not twice). A child never talks to a
server, a thread or a socket: it closes every socket it inherits, and when the kernel runs a thread
that is neither the kernel's nor one of kvlab's servers (``SERVER_THREADS``, lesson 12) at the
moment a cell asks, the cell is not forked and ``<seq>.json`` says ``"unsafe"`` (the lesson is then
run headless for the site: tests/lesson_runs.py).

:func:`stop` ends the recording (before the browser test re-draws cells in classroom mode).

Example (in a kernel, by tests/test_browser.py through the kernel, with no cell of its own):
    >>> import site_recorder                                           # doctest: +SKIP
    >>> site_recorder.start("/tmp/frames", ["viz.stepper(frames)"])    # doctest: +SKIP
"""
from __future__ import annotations

import io
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

# The kernel's own threads (ipykernel 7, IPython 9): anything else is the lesson's.
KERNEL_THREADS = re.compile(r"^(MainThread|IOPub|Heartbeat|Control|Shell channel|IPythonHistorySavingThread|"
                            r"Thread-\d+( \(_watch_pipe_fd\))?|subshell-[0-9a-f-]+)$")
# The threads of kvlab's own servers (kvlab.serve: the engine's loop, the HTTP server and the worker
# threads its web framework runs a plain handler in, lesson 12): a
# cell may fork beside them, because the child closes every socket it inherits first (it cannot talk
# to them, or to anything) and the lessons' frames-mode drawing reads recorded states only (a child
# that waited on them would be killed after CHILD_TIMEOUT_S, and the lesson run headless).
SERVER_THREADS = re.compile(r"^(kvlab-(engine|http)|AnyIO worker thread)$")
CHILD_TIMEOUT_S = 240.0
# Children running at once: a child records its cell while the lesson goes on (the parent waits
# for the oldest when there are more); stop() waits for every one.
MAX_CHILDREN = 2


class _Capture:
    """What a cell shows, in the order it shows it (as nbclient saves it): streams joined while no
    display comes between them, ``clear_output`` and ``update_display`` applied."""

    def __init__(self) -> None:
        self.outputs: list[dict] = []

    def add_text(self, name: str, text: str) -> None:
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += text
        elif text:
            self.outputs.append({"output_type": "stream", "name": name, "text": text})

    def add_display(self, data: dict, metadata: dict | None, display_id: str | None = None, update: bool = False) -> None:
        if update:
            for o in self.outputs:
                if o.get("_display_id") == display_id:
                    o["data"], o["metadata"] = dict(data), dict(metadata or {})
            return
        if data:   # a cell's value that displayed itself (_ipython_display_) leaves an empty one
            self.outputs.append({"output_type": "display_data", "data": dict(data), "metadata": dict(metadata or {}),
                                 "_display_id": display_id})

    def stream(self, name: str):
        capture = self

        class _Stream(io.TextIOBase):
            def write(self, text: str) -> int:
                capture.add_text(name, text)
                return len(text)

        return _Stream()

    def publisher(self):
        from IPython.core.displaypub import DisplayPublisher

        capture = self

        class _Publisher(DisplayPublisher):
            def publish(self, data, metadata=None, source=None, *, transient=None, update=False):
                capture.add_display(data, metadata, (transient or {}).get("display_id"), update)

            def clear_output(self, wait=False):
                capture.outputs.clear()

        return _Publisher()

    def displayhook(self, ip):
        capture = self

        def hook(value=None):
            if value is not None:
                data, metadata = ip.display_formatter.format(value)
                capture.add_display(data, metadata)

        return hook

    def done(self) -> list[dict]:
        for o in self.outputs:
            o.pop("_display_id", None)
        return json.loads(json.dumps(self.outputs, default=str))


class _Recorder:
    def __init__(self, out: Path, drawn: list[str]) -> None:
        self.out, self.drawn, self.seq = out, set(drawn), 0
        self.child_pid: int | None = None     # the parent: the child of the running cell
        self.children: list[tuple[int, dict]] = []   # the parent: children still running, with their cell's timing
        self.capture: _Capture | None = None  # the child: what its cell shows
        self.shadow: _Capture | None = None   # the parent, in a drawing cell not yet forked: what it has shown
        self.recorded = False                 # the parent: this cell's record is written (unsafe) or forked
        self.active = True
        self.cells: list[dict] = []           # the parent: per cell run, its seconds (for the suite's figures)
        self._t0: tuple[float, float] | None = None
        self._tees: list[tuple[object, str, object]] = []   # (object, method name, its tee)

    def pre(self, info) -> None:
        self._t0 = (time.monotonic(), time.process_time())
        if not self.active or info.raw_cell not in self.drawn:
            return
        self.seq += 1
        self.recorded, self.shadow = False, _Capture()
        self._tee()

    def _tee(self) -> None:
        """Keep what the cell shows in the shadow, as the front end gets it: streams, displays,
        clear_output and the cell's value (instance attributes over the kernel's own methods)."""
        from IPython import get_ipython

        ip, shadow = get_ipython(), self.shadow
        pub, hook = ip.display_pub, ip.displayhook
        publish, clear, write_format = pub.publish, pub.clear_output, hook.write_format_data

        def tee_publish(data, metadata=None, *args, transient=None, update=False, **kwargs):
            shadow.add_display(data, metadata, (transient or {}).get("display_id"), update)
            return publish(data, metadata, *args, transient=transient, update=update, **kwargs)

        def tee_clear(wait=False):
            shadow.outputs.clear()
            return clear(wait)

        def tee_format(format_dict, md_dict=None):
            shadow.add_display(format_dict, md_dict)
            return write_format(format_dict, md_dict)

        self._tees = [(pub, "publish", tee_publish), (pub, "clear_output", tee_clear),
                      (hook, "write_format_data", tee_format)]
        for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
            self._tees.append((stream, "write", self._tee_write(stream, name, shadow)))
        for obj, attr, fn in self._tees:
            setattr(obj, attr, fn)

    @staticmethod
    def _tee_write(stream, name: str, shadow: _Capture):
        write = stream.write

        def tee_write(text):
            shadow.add_text(name, text)
            return write(text)

        return tee_write

    def _untee(self) -> None:
        for obj, attr, _fn in self._tees:
            obj.__dict__.pop(attr, None)
        self._tees = []

    def wants_fork(self) -> bool:
        """The parent, in a drawing cell that has not yet asked for KVLAB_STATIC."""
        return self.active and self.capture is None and self.shadow is not None and not self.recorded

    def fork_now(self) -> None:
        """The cell asks for KVLAB_STATIC for the first time: fork (the child answers ``frames``)."""
        self.recorded = True
        foreign = [t.name for t in threading.enumerate()
                   if not KERNEL_THREADS.match(t.name) and not SERVER_THREADS.match(t.name)]
        if foreign:
            self._write({"unsafe": f"the kernel runs threads of its own: {foreign}"})
            return
        pid = os.fork()
        if pid:
            self.child_pid = pid
            return
        self._become_child()

    def _become_child(self) -> None:
        from IPython import get_ipython

        self.active = False
        _close_sockets()
        self._untee()
        self.capture, self.shadow = self.shadow, None   # what the cell showed before it asked
        os.environ["KVLAB_STATIC"] = "frames"
        ip = get_ipython()
        ip._showtraceback = lambda etype, evalue, stb: None   # never to the front end; post() records it
        hm = ip.history_manager   # the parent keeps the history (a child's line would collide with its own)
        hm.store_inputs = hm.store_output = hm.writeout_cache = lambda *a, **k: None
        sys.stdout, sys.stderr = self.capture.stream("stdout"), self.capture.stream("stderr")
        ip.display_pub = self.capture.publisher()
        ip.display_trap.hook = sys.displayhook = self.capture.displayhook(ip)  # the cell's value, from here on

    def post(self, result) -> None:
        if self.capture is not None:   # the child: write what the cell showed, and vanish
            try:
                self._write({"outputs": self._with_error(self.capture, result).done()})
            finally:
                os._exit(0)
        if self._t0 is None:   # the call that started the recording
            return
        if self.shadow is not None:   # a drawing cell: unforked, its shadow is its record
            self._untee()
            if not self.recorded:
                self._write({"outputs": self._with_error(self.shadow, result).done()})
            self.shadow = None
        timing = {"start": round(self._t0[0], 3), "wall": round(time.monotonic() - self._t0[0], 3),
                  "cpu": round(time.process_time() - self._t0[1], 3)}
        if self.child_pid is not None:   # the child goes on beside the next cells (at most MAX_CHILDREN at once)
            self.children.append((self.child_pid, timing))
            self.child_pid = None
            while len(self.children) > MAX_CHILDREN:
                self._reap_oldest()
        if self.active:
            self.cells.append(timing)

    @staticmethod
    def _with_error(capture: _Capture, result) -> _Capture:
        error = result.error_in_exec or result.error_before_exec
        if error is not None:
            capture.outputs.append({"output_type": "error", "ename": type(error).__name__,
                                    "evalue": str(error), "traceback": []})
        return capture

    def _reap_oldest(self) -> None:
        pid, timing = self.children.pop(0)
        waited = time.monotonic()
        timing["child_cpu"] = round(self._wait(pid), 3)
        timing["waited"] = round(time.monotonic() - waited, 3)

    def reap_all(self) -> None:
        while self.children:
            self._reap_oldest()

    def _write(self, record: dict) -> None:
        path = self.out / f"{self.seq:04d}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, ensure_ascii=False))
        tmp.rename(path)

    def _wait(self, pid: int) -> float:
        """Wait for the child (killed after CHILD_TIMEOUT_S); its CPU seconds."""
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while time.monotonic() < deadline:
            done, _status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return usage.ru_utime + usage.ru_stime
            time.sleep(0.02)
        os.kill(pid, 9)
        _pid, _status, usage = os.wait4(pid, 0)
        return usage.ru_utime + usage.ru_stime


def _close_sockets() -> None:
    """Close every socket the child inherited (the kernel's, the servers'): the parent's stay open."""
    import stat

    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                os.close(int(name))
        except OSError:   # the listing's own descriptor, gone by now
            pass


_RECORDER: _Recorder | None = None


def start(out: str, drawn: list[str]) -> None:
    """Record the static site's outputs of the cells in ``drawn`` into folder ``out``."""
    global _RECORDER
    from IPython import get_ipython

    ip = get_ipython()
    _RECORDER = _Recorder(Path(out), list(drawn))
    _RECORDER.out.mkdir(parents=True, exist_ok=True)
    ip.events.register("pre_run_cell", _RECORDER.pre)
    ip.events.register("post_run_cell", _RECORDER.post)
    _watch_environ(_RECORDER)


def _watch_environ(recorder: _Recorder) -> None:
    """``os.environ`` (the object every reader holds) made to call ``recorder.fork_now`` at the
    first read of KVLAB_STATIC in a drawing cell; :func:`stop` gives it back its own class."""
    class Watched(_PLAIN_ENVIRON):
        def __getitem__(self, key):
            if key == "KVLAB_STATIC" and recorder.wants_fork():
                recorder.fork_now()   # the child sets KVLAB_STATIC=frames: it reads that
            return _PLAIN_ENVIRON.__getitem__(self, key)

    os.environ.__class__ = Watched


_PLAIN_ENVIRON = type(os.environ)   # os.environ's own class, as this module found it


def stop() -> int:
    """End the recording; the number of cells recorded."""
    from IPython import get_ipython

    if _RECORDER is None:
        return 0
    ip = get_ipython()
    _RECORDER.active = False
    os.environ.__class__ = _PLAIN_ENVIRON
    _RECORDER.reap_all()
    for event, fn in (("pre_run_cell", _RECORDER.pre), ("post_run_cell", _RECORDER.post)):
        try:
            ip.events.unregister(event, fn)
        except ValueError:
            pass
    (_RECORDER.out / "cells.timing").write_text(json.dumps(_RECORDER.cells))
    return _RECORDER.seq
