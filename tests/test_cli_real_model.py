"""`python -m kvlab generate --model smollm2|file.gguf --chat ...` (issue 19 item 4): the chat
template applied, the reply printed up to the end-of-turn token, and the KV report (layers, KV
heads, head_dim, dtype, bytes per token, blocks used). A tiny GGUF file covers it in seconds; the
real SmolLM2 runs when its wheel is installed (skipped with the install line otherwise)."""
from __future__ import annotations

import pytest

from kvlab.compute.gguf import SMOLLM2_HINT, smollm2_path

from gguf_files import write_gguf
from test_cli import generate_in_process
from test_model import HF_CONFIG, random_hf_tensors

import gguf  # noqa: F401  (installed by the set-up: a missing one fails)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf", random_hf_tensors(HF_CONFIG), qtype="Q8_0")


def test_chat_on_a_gguf_file_applies_its_template_and_reports_the_cache(capsys, tiny_gguf):
    from kvlab.compute.loader import load_pretrained

    _, tok = load_pretrained(tiny_gguf)
    want = tok.apply_chat_template([{"role": "system", "content": "the"}, {"role": "user", "content": "there"}])
    code, out, err = generate_in_process(capsys, "--model", str(tiny_gguf), "--system", "the", "--chat", "there",
                                         "--max-tokens", "5", "--block-size", "4")
    assert code == 0, err
    lines = out.splitlines()
    assert f"{tiny_gguf}: 2 layers, 4 query heads, 2 KV heads, head_dim 16, float32" in out
    assert "kv         512 bytes per token (K and V: 2 x 2 layers x 2 KV heads x head_dim 16 x 4 bytes)" in lines
    assert f"prompt {len(want)} + generated 5 = {len(want) + 5}" in out
    n_blocks = -(-(len(want) + 4) // 4)
    assert f"blocks     {n_blocks} of 4 tokens" in out
    assert not lines[0].startswith("<|im_start|>")                      # the reply only, not the prompt


def test_prompt_still_continues_raw_text_on_a_gguf_file(capsys, tiny_gguf):
    code, out, err = generate_in_process(capsys, "--model", str(tiny_gguf), "--prompt", "the", "--max-tokens", "3")
    assert code == 0 and out.startswith("the"), err


@pytest.mark.parametrize("args,needle", [
    (("--chat", "hi"), "has no chat template; give raw text with --prompt"),
    (("--prompt", "x", "--chat", "hi"), "not allowed with argument"),
    (("--prompt", "x", "--system", "be brief"), "--system goes with --chat"),
    (("--max-tokens", "2"), "one of the arguments --prompt --chat is required"),
])
def test_chat_arguments_wrong_one_line_exit_2(capsys, args, needle):
    code, out, err = generate_in_process(capsys, *args)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and not out, (args, out, err)
    assert lines[-1].startswith("kvlab generate: error:") and needle in lines[-1], (args, err)


@pytest.mark.slow
def test_smollm2_answers_the_refund_question(capsys):
    if smollm2_path() is None:
        pytest.skip(SMOLLM2_HINT)
    # 8 tokens: the reply's first words are what is checked (each SmolLM2 step is ~0.5 s of CPU here)
    code, out, err = generate_in_process(capsys, "--model", "smollm2", "--chat", "How do I apply for a refund?",
                                         "--max-tokens", "8")
    assert code == 0, err
    assert out.startswith("To apply for a refund"), out
    assert "smollm2: 30 layers, 9 query heads, 3 KV heads, head_dim 64, float32, rope theta 100000" in out
    assert "46,080 bytes per token" in out                                # 2 x 30 x 3 x 64 x 4
    assert "blocks     " in out and "ms per token" in out
