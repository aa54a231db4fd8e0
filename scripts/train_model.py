"""Train the bundled tiny Llama-style model and its byte-level BPE tokenizer, on CPU, offline.

Data (every machine with Python has it, no download):
  1. the docstrings of the Python standard library's own .py sources (found under
     ``sysconfig.get_paths()["stdlib"]``, read with ``ast.get_docstring``, tests and
     site-packages skipped), in sorted file order;
     plus the language-reference topics ``pydoc_data.topics`` that ``help("if")`` shows;
  2. a small hand-written set of Chinese customer-service sentences (``CHINESE`` below, in the
     spirit of the source notes' refund / shipping / invoice example), repeated so the
     tokenizer learns merges for them and "怎么申请退款" becomes a few readable tokens.

Output: assets/model/{tokenizer.json, config.json, model.safetensors, TRAINING.md}.

Usage (the command recorded in assets/model/TRAINING.md):
    .venv/bin/python scripts/train_model.py --out assets/model --seed 0 --max-minutes 14

Not handled here: evaluation beyond a held-out loss and a sample, GPU training, resuming.
"""
from __future__ import annotations

import argparse
import ast
import math
import os
import random
import sys
import sysconfig
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHINESE = """\
你是一个电商平台的客服助手，请礼貌、简洁地回答用户的问题。
示例：用户问：怎么申请退款？客服答：请在订单页面点击申请退款，填写原因后提交。
示例：用户问：订单什么时候发货？客服答：一般在付款后四十八小时内发货。
示例：用户问：发票怎么开？客服答：请在订单详情页点击申请发票。
怎么申请退款？
订单什么时候发货？
发票怎么开？
人工呢？我要找人工客服。
我想申请退款，商品有质量问题。
退款多久能到账？一般三到五个工作日到账。
我的订单已经付款了，什么时候发货？
请问可以修改收货地址吗？
商品收到了，但是尺寸不合适，可以换货吗？
怎么联系人工客服？
您好，请问有什么可以帮您？
请提供您的订单号，我帮您查询。
您的订单已经发货，快递单号已经发送到您的手机。
很抱歉给您带来不便，我们会尽快处理。
退货运费由谁承担？
如果是质量问题，运费由我们承担。
发票可以开电子发票吗？可以，电子发票会发送到您的邮箱。
请问怎么取消订单？在订单页面点击取消订单即可。
优惠券怎么使用？下单时选择优惠券即可抵扣。
感谢您的耐心等待，祝您生活愉快！
"""


def stdlib_docstrings() -> list[str]:
    """Docstrings (module, class, function) of every stdlib .py file, in sorted path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "site-packages", "dist-packages", "idlelib", "lib2to3", "turtledemo", "__pycache__"}
    docs: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if skip & set(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    docs.append(doc.strip())
    try:  # the language reference topics that pydoc shows (help("if")): plain English prose
        from pydoc_data.topics import topics
        docs.extend(topics[k].strip() for k in sorted(topics))
    except ImportError:
        pass
    return docs


def build_corpus(chinese_repeats: int) -> str:
    docs = stdlib_docstrings()
    zh = [CHINESE] * chinese_repeats
    parts = docs + zh
    random.Random(0).shuffle(parts)
    return "\n\n".join(parts)


def train_tokenizer(text: str, vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from kvlab.compute.tokenizer import BOS, EOS, Tokenizer as KVTokenizer

    tok = Tokenizer(models.BPE())
    # Each Chinese character is its own pre-token (so 怎么申请退款 -> 怎|么|申|请|退|款, which reads
    # well in a prefix tree), then GPT-2's byte-level split for everything else.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{Han}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[BOS, EOS], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    chunks = text.split("\n\n")
    tok.train_from_iterator(chunks, trainer=trainer)
    return KVTokenizer(tok)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="assets/model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--max-minutes", type=float, default=14.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chinese-repeats", type=int, default=40)
    args = ap.parse_args()

    from kvlab.compute import Llama, LlamaConfig, save_pretrained

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    text = build_corpus(args.chinese_repeats)
    tok = train_tokenizer(text, args.vocab_size)
    tok.hf.save(str(out / "tokenizer.json"))
    ids = torch.tensor(tok.encode(text), dtype=torch.long)
    n_val = len(ids) // 50
    train_ids, val_ids = ids[:-n_val], ids[-n_val:]
    print(f"corpus: {len(text):,} chars, {len(ids):,} tokens; tokenizer {tok.vocab_size} "
          f"({time.time() - t0:.0f}s)", flush=True)
    print("怎么申请退款 ->", tok.tokens_text(tok.encode("怎么申请退款")), flush=True)

    cfg = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                      tie_word_embeddings=True, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id)
    model = Llama(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02 if "o_proj" not in name and "down_proj" not in name
                                      else 0.02 / math.sqrt(2 * cfg.num_hidden_layers))
    print(f"params: {sum(p.numel() for p in model.parameters()):,}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(args.seed)
    T, B = args.seq_len, args.batch_size

    def batch(src: torch.Tensor):
        ix = torch.randint(len(src) - T - 1, (B,), generator=gen)
        x = torch.stack([src[i : i + T] for i in ix.tolist()])          # (B, T)
        y = torch.stack([src[i + 1 : i + T + 1] for i in ix.tolist()])  # (B, T)
        return x, y

    budget = args.max_minutes * 60
    t_train = time.time()
    warmup = 50
    est_steps = args.max_steps
    step, loss_ema = 0, None
    while step < args.max_steps and time.time() - t_train < budget:
        elapsed = time.time() - t_train
        if step == 50:  # estimate how many steps fit the time budget, for the cosine schedule
            est_steps = min(args.max_steps, int(budget / (elapsed / 50)))
        frac = min(1.0, step / max(1, est_steps))
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch(train_ids)
        logits = model(x)                                                  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_ema = loss.item() if loss_ema is None else 0.98 * loss_ema + 0.02 * loss.item()
        step += 1
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} ema {loss_ema:.3f} lr {lr:.2e} "
                  f"{time.time() - t_train:.0f}s", flush=True)

    model.eval()
    with torch.no_grad():
        vg = torch.Generator().manual_seed(1234)
        losses = []
        for _ in range(20):
            ix = torch.randint(len(val_ids) - T - 1, (8,), generator=vg)
            x = torch.stack([val_ids[i : i + T] for i in ix.tolist()])
            y = torch.stack([val_ids[i + 1 : i + T + 1] for i in ix.tolist()])
            lg = model(x)
            losses.append(torch.nn.functional.cross_entropy(lg.view(-1, lg.shape[-1]), y.view(-1)).item())
        val_loss = sum(losses) / len(losses)
    save_pretrained(model, out, tokenizer=tok)
    secs = time.time() - t0
    sample_ids = tok.encode("The function returns")
    with torch.no_grad():
        for _ in range(30):
            nxt = model(torch.tensor([sample_ids]))[0, -1].argmax().item()
            sample_ids.append(nxt)
    sample = tok.decode(sample_ids)
    print(f"done: {step} steps, train loss (ema) {loss_ema:.3f}, val loss {val_loss:.3f}, {secs:.0f}s", flush=True)
    print("sample:", repr(sample), flush=True)
    (out / "train_result.txt").write_text(
        f"steps={step}\ntrain_loss_ema={loss_ema:.4f}\nval_loss={val_loss:.4f}\nseconds={secs:.0f}\n"
        f"tokens_seen={step * B * T}\ncorpus_tokens={len(ids)}\ncorpus_chars={len(text)}\n"
        f"python={sys.version.split()[0]}\ntorch={torch.__version__}\nsample={sample!r}\n")


if __name__ == "__main__":
    main()
