"""Issue 30 item 2: a chat template is checked when it is loaded (a syntax error or a name it is
not given: a CheckpointError naming ``tokenizer.chat_template``), every render is bounded in
size and time, and ``generate --chat`` turns any template failure into one stderr line, exit 2.

Before: a broken template loaded fine and failed at the first chat; 16 of 22 hostile templates
gave CLI tracebacks (SecurityError, TemplateSyntaxError, UndefinedError, TypeError, OverflowError,
RecursionError with 1,408 stderr lines, MemoryError for ``'a' * 4e9``), and nested
``range(100000)`` loops rendered for ever.
"""
from __future__ import annotations

import dataclasses
import time

import pytest

from kvlab.compute import gguf as kg
from kvlab.compute.config import CheckpointError
from kvlab.compute.tokenizer import MAX_RENDER_S, load_bundled_tokenizer

from gguf_files import write_gguf
from test_cli import generate_in_process
from test_model import HF_CONFIG, random_hf_tensors

import gguf  # noqa: F401,E402  (installed by the set-up: a missing one fails, never skips)

USER = [{"role": "user", "content": "hi"}]
BROKEN_AT_LOAD = {           # template -> what the error says
    "{% if %}": "does not compile",
    "{{ messages[0].content }": "does not compile",
    "{{ helper(messages) }}": "UndefinedError",
    "{{ undefined_table.rows }}": "UndefinedError",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}": "SecurityError",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}": "failed",
    "{% include 'x.j2' %}": "failed",
    "{{ messages[0].content + 1 }}": "TypeError",
    "{{ 2 ** 100000000 }}": "too large a number",
    "{{ 'a' * 4000000000 }}": "repetition",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}": "RecursionError",
    "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}": "past 1,048,576 characters",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}": "took more than",
}
# Loads (its trial chats render) but fails on one message: only the chat itself can find it.
FAILS_AT_CHAT = "{% for m in messages %}{% if m.content == 'boom' %}{{ m.missing.x }}{% endif %}{{ m.content }}{% endfor %}"


@pytest.fixture(scope="module")
def tensors():
    return random_hf_tensors(HF_CONFIG, seed=3)


def _template_tokenizer(template: str):
    return dataclasses.replace(load_bundled_tokenizer(), chat_template=template)


@pytest.mark.parametrize("template", list(BROKEN_AT_LOAD), ids=range(len(BROKEN_AT_LOAD)))
def test_a_broken_template_fails_when_rendered_as_one_clear_error(template):
    tok = _template_tokenizer(template)
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        tok.render_chat(USER)
    assert time.perf_counter() - t0 < MAX_RENDER_S + 5                   # the time limit holds
    e = info.value
    assert e.field == "tokenizer.chat_template" and BROKEN_AT_LOAD[template] in str(e), str(e)
    assert "\n" not in str(e) and len(str(e)) < 400


def test_a_broken_template_is_refused_when_the_gguf_is_loaded(tmp_path, tensors):
    for i, template in enumerate(["{% if %}", "{{ helper(messages) }}", "{{ 'a' * 4000000000 }}"]):
        path = write_gguf(tmp_path / f"t{i}.gguf", tensors, meta={"tokenizer.chat_template": template})
        with pytest.raises(CheckpointError) as info:
            kg.load_gguf(path)
        assert info.value.field == "tokenizer.chat_template" and str(path) in str(info.value)


def test_a_template_that_refuses_a_role_still_loads(tmp_path, tensors):
    """raise_exception is the template's own rule (Gemma refuses a system turn): not a fault."""
    template = ("{% if messages[0].role == 'system' %}{{ raise_exception('no system turn') }}{% endif %}"
                "{% for m in messages %}{{ m.content }}{% endfor %}")
    _, tok = kg.load_gguf(write_gguf(tmp_path / "r.gguf", tensors, meta={"tokenizer.chat_template": template}))
    assert tok.render_chat(USER) == "hi"
    with pytest.raises(CheckpointError, match="refused the messages: no system turn"):
        tok.render_chat([{"role": "system", "content": "s"}] + USER)


def test_generate_chat_turns_every_template_failure_into_one_line(capsys, tmp_path, tensors):
    cases = [("{% if %}", "does not compile"), ("{{ 'a' * 4000000000 }}", "repetition"),
             ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "RecursionError"),
             (FAILS_AT_CHAT, "UndefinedError")]
    for i, (template, needle) in enumerate(cases):
        path = write_gguf(tmp_path / f"c{i}.gguf", tensors, meta={"tokenizer.chat_template": template})
        code, out, err = generate_in_process(capsys, "--model", str(path), "--chat", "boom", "--max-tokens", "2")
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and not out, (template, out, err)
        assert len(lines) == 1 and lines[0].startswith("kvlab generate: error:") and needle in lines[0], (template, err)
        assert "tokenizer.chat_template" in lines[0] or "chat template" in lines[0]
