"""The engine on a shared-prefix workload, with and without radix prefix reuse (measured).

Workload: a customer-service system prompt plus few-shot examples (the source notes' [A][B]),
shared by every request, followed by one short question each; requests arrive a few engine
steps apart. Both runs use the same engine, pool and model; only ``radix`` differs. Reported:
prefill tokens computed and saved, mean time to first token, tokens per second, peak blocks,
and the ratios (measured on this machine; token counts are exact).

Usage:
    .venv/bin/python bench/bench_engine.py                     # CPU, torch backend
    .venv/bin/python bench/bench_engine.py --backend triton    # GPU: the Triton kernels natively
    .venv/bin/python bench/bench_engine.py --requests 32 --max-new 16

``figure(results)`` builds the plotly bar chart the lessons reuse.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode import parse_common  # noqa: E402

from kvlab.compute.engine import Engine  # noqa: E402

SYSTEM = ("你是一个电商平台的客服助手，请礼貌、简洁地回答用户的问题。\n"
          "示例：用户问：怎么申请退款？客服答：请在订单页面点击申请退款，填写原因后提交。\n"
          "示例：用户问：订单什么时候发货？客服答：一般在付款后四十八小时内发货。\n")
QUESTIONS = ["怎么申请退款？", "订单什么时候发货？", "发票怎么开？", "人工呢？", "退款多久能到账？",
             "可以修改收货地址吗？", "怎么取消订单？", "优惠券怎么使用？", "退货运费由谁承担？",
             "可以开电子发票吗？", "怎么联系人工客服？", "尺寸不合适可以换货吗？"]


def workload(tok, num_requests: int) -> list[list[int]]:
    return [tok.encode(SYSTEM + "用户问：" + QUESTIONS[i % len(QUESTIONS)]) for i in range(num_requests)]


def run_once(model, prompts, radix: bool, args) -> dict:
    eng = Engine(model, num_blocks=args.num_blocks, block_size=args.block_size, radix=radix,
                 max_batch_size=args.max_batch, attention_backend=args.backend)
    for i, p in enumerate(prompts):
        eng.submit(p, args.max_new, arrival_step=i * args.gap)
    rep = eng.run()
    out = rep.summary()
    out["radix"] = radix
    out["outputs"] = [r.outputs for r in rep.requests]
    return out


def figure(results):
    import plotly.graph_objects as go

    names = ["with radix" if r["radix"] else "without radix" for r in results]
    fig = go.Figure([go.Bar(name="prefill computed", x=names, y=[r["prefill_computed"] for r in results],
                            marker_color="#4C78A8"),
                     go.Bar(name="prefill saved (hits)", x=names, y=[r["prefill_saved"] for r in results],
                            marker_color="#54A24B")])
    fig.update_layout(barmode="stack", title="Prefill tokens, shared-prefix workload (measured)",
                      yaxis_title="tokens", width=520, height=380)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-new", type=int, default=8)
    ap.add_argument("--gap", type=int, default=2, help="engine steps between arrivals")
    ap.add_argument("--num-blocks", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=4)
    ap.add_argument("--max-batch", type=int, default=8)
    args, model, tok = parse_common(ap)
    prompts = workload(tok, args.requests)
    run_once(model, prompts[:2], True, args)                                   # warm-up
    results = [run_once(model, prompts, r, args) for r in (False, True)]
    same = results[0]["outputs"] == results[1]["outputs"]
    print(f"shared-prefix workload: {args.requests} requests, shared prefix {len(tok.encode(SYSTEM))} tokens, "
          f"prompts {len(prompts[0])}..{max(map(len, prompts))} tokens, {args.max_new} new tokens each; "
          f"{args.device}, {args.backend} backend (measured)")
    print(f"{'':<14} {'computed':>9} {'saved':>7} {'TTFT ms':>9} {'tok/s':>8} {'peak blocks':>12} {'wall s':>7}")
    for r in results:
        print(f"{'with radix' if r['radix'] else 'without radix':<14} {r['prefill_computed']:>9} "
              f"{r['prefill_saved']:>7} {1e3 * r['mean_ttft_s']:>9.1f} {r['tokens_per_s']:>8.1f} "
              f"{r['peak_blocks']:>12} {r['wall_s']:>7.2f}")
    off, on = results
    print(f"\nprefill tokens computed, without / with radix: {off['prefill_computed'] / on['prefill_computed']:.2f}x")
    print(f"mean TTFT, without / with radix: {off['mean_ttft_s'] / on['mean_ttft_s']:.2f}x")
    print(f"hit rate with radix: {on['prefill_saved'] / (on['prefill_saved'] + on['prefill_computed']):.1%}")
    print(f"identical outputs with and without radix: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps([{k: v for k, v in r.items() if k != "outputs"} for r in results], indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
