"""`python -m kvlab ...` prints the walks and generates text with a KV report; bad arguments give one
line and exit 2."""
from __future__ import annotations

import os
import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvlab", *args], capture_output=True, text=True, timeout=60)


def test_translate_walk():
    r = run("translate", "--block-size", "4", "--table", "3,7,1,5,9", "--pos", "9")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "pos // block_size = 9 // 4 = 2  (L2)" in out
    assert "pos % block_size = 9 % 4 = 1" in out
    assert "block_table[2] = 1  (L2 -> P1)" in out
    assert "pos 9 -> L2, offset 1 -> P1 -> slot 5" in out


def test_translate_with_model_bytes():
    r = run("translate", "--pos", "9", "--model", "llama-2-70b")
    assert r.returncode == 0, r.stderr
    assert f"byte {4 * 327680 + 327680:,}" in r.stdout


def test_size():
    r = run("size", "--model", "llama-2-70b", "--tokens", "4096")
    assert r.returncode == 0, r.stderr
    assert "2 x layers 80 x kv_heads 8 x head_dim 128 x tokens 4096 x bytes 2 = 1,342,177,280 bytes" in r.stdout
    assert "10,737,418,240 bytes" in r.stdout


def test_bad_arguments_one_line_exit_2():
    for args, needle in [
        (("translate", "--pos", "20"), "pos 20"),
        (("translate", "--pos", "-1"), "-1"),
        (("translate", "--pos", "3", "--block-size", "0"), "block_size"),
        (("translate", "--pos", "x"), "'x'"),
        (("translate", "--pos", "1", "--table", "3,a"), "3,a"),
        (("size", "--model", "nope", "--tokens", "1"), "nope"),
        (("size", "--model", "opt-13b", "--tokens", "-1"), "-1"),
        (("bogus",), "bogus"),
    ]:
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, (args, r.stderr)


def test_translate_refuses_tables_that_are_not_block_tables():
    """Issue 15 item 5: a negative block id, or one physical block named twice, used to print a slot."""
    for args, needle in [
        (("translate", "--table=-1,2", "--pos", "0"), "-1"),
        (("translate", "--table", "3,3", "--pos", "5"), "twice"),
        (("translate", "--pos", "1", "--model", ""), "''"),
        (("translate", "--pos", "1", "--model", "nope", "--bytes-per-token", "8"), "--bytes-per-token"),
    ]:
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and needle in lines[0] and not r.stdout, (args, r.stdout, r.stderr)


def test_an_empty_table_entry_is_an_error_not_skipped():
    """``--table 3,,7`` was read as 3,7 (issue 24 item 7)."""
    for table, needle in [("3,,7", "'3,,7' (entry 2 of 3 is empty)"), ("3,7,", "entry 3 of 3"), (",3", "entry 1 of 2"),
                          ("3, ,7", "entry 2 of 3")]:
        r = run("translate", "--table", table, "--pos", "1")
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and not r.stdout and len(lines) == 1, (table, r.stderr)
        assert "--table" in lines[0] and needle in lines[0], (table, r.stderr)


def test_bare_command_says_what_to_do_on_stderr():
    r = run()
    assert r.returncode == 2 and not r.stdout
    assert "choose a command" in r.stderr and "translate" in r.stderr and "simulate" in r.stderr


# ---- kvlab generate (issue 14 item 3) ------------------------------------------------------------

def generate_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """main(["generate", ...]) in this process (no 2 s torch import per case), on one torch thread
    (tiny matmuls; CI has 2 shared cores): (code, stdout, stderr)."""
    import torch

    from kvlab.__main__ import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = main(["generate", *args])
    except SystemExit as e:                         # argparse errors exit 2 themselves
        code = e.code
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_generate_on_the_bundled_model_from_another_directory(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if env.get("PYTHONPATH"):                       # PYTHONPATH=. (a machine without the editable install)
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    r = subprocess.run([sys.executable, "-m", "kvlab", "generate", "--prompt", "Return the list", "--max-tokens", "12"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("Return the list") and len(out.splitlines()[0]) > len("Return the list")
    assert "the bundled model: 4 layers, 4 query heads, 2 KV heads, head_dim 32, float32" in out
    assert "prompt 3 + generated 12 = 15; K/V held for 14" in out
    assert "1 of 16 tokens = 16 slots, 2 unused in the last block" in out
    assert "2 x layers 4 x kv_heads 2 x head_dim 32 x tokens 14 x bytes 4 = 28,672 bytes" in out
    assert "ms per token" in out and "tokens/s" in out
    assert r.stderr == ""                           # short run: no progress bar


def test_generate_strategies_agree_and_report_their_memory(capsys):
    texts = {}
    for strategy, needle in [("naive", "no cache"), ("contiguous", "reserved 16,384 bytes"),
                             ("paged", "2 of 4 tokens = 8 slots")]:
        code, out, err = generate_in_process(capsys, "--prompt", "Return the", "--max-tokens", "6",
                                             "--strategy", strategy, "--block-size", "4")
        assert code == 0, err
        assert needle in out, out
        texts[strategy] = out.split("\n\n")[0]
    assert len(set(texts.values())) == 1, texts


def test_generate_on_a_saved_random_checkpoint(capsys, tmp_path):
    import torch

    from kvlab.compute import Llama, LlamaConfig, load_bundled_tokenizer, save_pretrained

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=64,
                      rope_theta=5e5, rope_scaling={"rope_type": "linear", "factor": 2.0})
    save_pretrained(Llama(cfg), tmp_path / "ckpt", tokenizer=load_bundled_tokenizer(), dtype=torch.bfloat16)
    code, out, err = generate_in_process(capsys, "--model", str(tmp_path / "ckpt"), "--prompt", "def f(x):",
                                         "--max-tokens", "5", "--block-size", "2")
    assert code == 0, err
    assert f"{tmp_path / 'ckpt'}: 2 layers, 4 query heads, 1 KV heads, head_dim 8" in out
    assert "rope theta 500000, linear scaling (from rope_theta)" in out
    assert "2 x layers 2 x kv_heads 1 x head_dim 8 x tokens" in out


def test_generate_shows_a_progress_bar_on_long_runs(capsys):
    code, out, err = generate_in_process(capsys, "--prompt", "Return", "--max-tokens", "64", "--strategy", "contiguous")
    assert code == 0 and "generate (contiguous)" in err and "0/64" in err
    code, out, err = generate_in_process(capsys, "--prompt", "Return", "--max-tokens", "64", "--strategy",
                                         "contiguous", "--no-progress")
    assert code == 0 and err == ""


def test_generate_bad_input_one_line_exit_2(capsys, tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{nope")
    (tmp_path / "notok").mkdir()
    from kvlab.compute import Llama, LlamaConfig, save_pretrained

    save_pretrained(Llama(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=16, num_hidden_layers=1)),
                    tmp_path / "notok")
    for args, needle in [
        (("--model", str(tmp_path / "missing"), "--prompt", "x"), "does not exist"),
        (("--model", str(tmp_path / "bad"), "--prompt", "x"), "config.json: is not valid JSON"),
        (("--model", str(tmp_path / "notok"), "--prompt", "x"), "no tokenizer.json"),
        (("--prompt", "x", "--max-tokens", "0"), "--max-tokens must be >= 1, got 0"),
        (("--prompt", "x", "--max-tokens", "-3"), "-3"),
        (("--prompt", "x", "--max-tokens", "ten"), "'ten'"),
        (("--prompt", "x", "--block-size", "0"), "--block-size must be >= 1"),
        (("--prompt", "x", "--strategy", "radix"), "'radix'"),
        (("--prompt", "", "--max-tokens", "2"), "empty"),
        (("--prompt", "Return the", "--max-tokens", "5000"), "2048"),
        (("--max-tokens", "2",), "--prompt"),
    ]:
        code, out, err = generate_in_process(capsys, *args)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and not out, (args, out, err)
        assert len(lines) == 1 and lines[0].startswith("kvlab generate: error:") and needle in lines[0], (args, err)


def test_generate_refuses_a_huge_block_size_and_a_prompt_that_is_not_utf8_before_loading(capsys):
    """``--block-size 100000000`` once died allocating 204.8 GB; a non-UTF-8 prompt died in the tokenizer."""
    for args, needle in [
        (("--prompt", "x", "--block-size", "100000000"), "--block-size must be >= 1 and <= 2,048 tokens, got 100,000,000"),
        (("--prompt", "ab\udcffc"), "--prompt is not valid UTF-8 text: byte 0xff at character 2"),
    ]:
        code, out, err = generate_in_process(capsys, *args)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and not out and len(lines) == 1 and needle in lines[0], (args, err)
    r = subprocess.run([sys.executable, "-m", "kvlab", "generate", "--prompt", b"ab\xffc"],  # bytes, as a shell passes them
                       capture_output=True, timeout=60)
    assert r.returncode == 2 and not r.stdout, r.stderr
    assert r.stderr.decode().strip() == "kvlab generate: error: --prompt is not valid UTF-8 text: byte 0xff at character 2"


def test_the_command_line_offers_the_strategies_generate_has():
    import kvlab.__main__
    from kvlab.compute import STRATEGIES

    assert kvlab.__main__.STRATEGIES == STRATEGIES


def test_the_command_line_imports_no_torch_at_start():
    code = "import sys, kvlab.__main__; assert 'torch' not in sys.modules and 'kvlab.compute' not in sys.modules"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
