"""What the Python of a decoding step costs: mt's cached decoder step three ways.

    python scripts/bench_native_step.py [--ckpt PATH] [--rows 1 16 64] [--steps 20] [--rounds 7] [--threads 2]
                                        [--force] [--smoke]

``scripts/bench_step_cost.py`` finds that a step of a small model costs mt's Python step about 1.3 ms more
than CTranslate2 whatever its rows. This splits it. The decoder layers of a greedy step run three ways on
the same cache, in one process, the order turning round by round:

- **python**: ``model.decode`` with the Python step (``DecoderLayer.step``; ``--native off``);
- **aten**: ``scripts/native_step.cpp``, compiled on first use by ``torch.utils.cpp_extension`` (a C++
  compiler needed), which makes the Python step's ATen calls in the same order from C++, so its logits must
  equal the Python step's bit for bit (checked, and printed): what the Python between the calls costs;
- **native**: ``model.decode`` with mt's C++ step (``mt.model.native``, mt's default where it covers the
  model): one ATen call a linear, the rest in loops of its own; its largest logit difference from the
  Python step and how many rows x steps choose another token are printed.

All three embed the tokens, apply the final norm and project in Python; only the layers differ. The first
lines of ``--input`` are encoded and decoded greedily for ``--steps`` steps at each row count in ``--rows``;
a step is the median over ``--rounds`` of the steps' mean time. ``scripts/native_step.cpp`` covers plain
float32 linears, fused QKV, LayerNorm, ReLU, Post-LN or Pre-LN, no RoPE, qk-norm or GQA, and is not mt's
decoder: it exists to measure. The checkpoint defaults to ``make bench-decode-peers``'s mini (the paper's
model after 1,000 updates, trained once into ``runs/bench_decode_mini``). ``--smoke`` (the test's): rows 1
and 2, 3 steps, 1 round, no busy check.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import time
from pathlib import Path

from bench_peers import git_commit, refuse_if_busy

REPO = Path(__file__).resolve().parents[1]
SOURCE = Path(__file__).resolve().parent / "native_step.cpp"
WAYS = ("python", "aten", "native")
LAYER_PARTS = ("self_attn.qkv", "self_attn.out", "self_attn_res.norm", "cross_attn.q", "cross_attn.out",
               "cross_attn_res.norm", "ffn.fc1", "ffn.fc2", "ffn_res.norm")


def unsupported(cfg) -> str | None:
    """Why the C++ step cannot run this model (None: it can)."""
    m = cfg.model
    checks = {"model.positions=rope": m.positions == "rope", "model.qk_norm": m.qk_norm,
              "model.kv_heads": m.kv_heads not in (0, m.heads), "model.norm": m.norm != "layernorm",
              "model.activation": m.activation != "relu"}
    found = [name for name, bad in checks.items() if bad]
    return f"the C++ step does not cover {', '.join(found)}" if found else None


def layer_weights(decoder) -> list:
    """The 18 tensors a layer ``native_step.cpp`` takes, in its order."""
    from torch import nn

    weights = []
    for layer in decoder.layers:
        for name in LAYER_PARTS:
            module = layer.get_submodule(name)
            if not name.endswith("norm") and type(module) is not nn.Linear:
                raise SystemExit(f"{name} is {type(module).__name__}: the C++ step takes plain float32 linears")
            weights += [module.weight.detach(), module.bias.detach()]
    return weights


class Steps:
    """The three ways of decoding ``steps`` greedy steps of ``rows`` sentences from the same start."""

    def __init__(self, model, tokenizers, lines: list[str], aten, native) -> None:
        self.model, self.tokenizers, self.lines, self.aten, self.native = model, tokenizers, lines, aten, native
        self.decoder = model.decoder
        self.weights = layer_weights(self.decoder)
        self.heads = self.decoder.layers[0].self_attn.heads
        self.pre_ln = self.decoder.final_norm is not None

    def start(self, rows: int):
        """Encoder output, a cache after step 0 (capacity 32 steps) and the first chosen tokens (rows, 1)."""
        import torch

        from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

        ids = [self.tokenizers.src.encode(line) + [EOS_ID] for line in self.lines[:rows]]
        width = max(map(len, ids))
        src = torch.tensor([i + [PAD_ID] * (width - len(i)) for i in ids])
        enc = self.model.encode(src, src.eq(PAD_ID))
        cache = self.model.new_cache()
        logits = self.model.decode(torch.full((rows, 1), BOS_ID), enc, cache)  # (rows, 1, V)
        return enc, cache, logits[:, -1].argmax(-1, keepdim=True)

    def python(self, enc, cache, tok, steps: int) -> list:
        self.decoder.native = None
        return self.python_loop(enc, cache, tok, steps)

    def native_steps(self, enc, cache, tok, steps: int) -> list:
        self.decoder.native = self.native
        try:
            return self.python_loop(enc, cache, tok, steps)
        finally:
            self.decoder.native = None

    def python_loop(self, enc, cache, tok, steps: int) -> list:
        out = []
        for _ in range(steps):
            logits = self.model.decode(tok, enc, cache)  # (rows, 1, V)
            out.append(logits)
            tok = logits[:, -1].argmax(-1, keepdim=True)
        return out

    def aten_steps(self, enc, cache, tok, steps: int) -> list:
        keys = [layer.self_attn.keys for layer in cache.layers]
        values = [layer.self_attn.values for layer in cache.layers]
        cross_k, cross_v = [layer.cross_k for layer in cache.layers], [layer.cross_v for layer in cache.layers]
        mask = cache.source_bias(keys[0].dtype)  # (rows, 1, 1, S)
        out = []
        for _ in range(steps):
            length = cache.length
            x = self.decoder.embedding(tok, length)  # (rows, 1, D)
            h = self.aten.decoder_step(x, self.weights, keys, values, length, cross_k, cross_v, mask,
                                       self.heads, self.pre_ln)
            for layer in cache.layers:
                layer.self_attn.length = length + 1
            if self.decoder.final_norm is not None:
                h = self.decoder.final_norm(h)
            logits = self.decoder.project(h)
            out.append(logits)
            tok = logits[:, -1].argmax(-1, keepdim=True)
        return out


def measure(steps: Steps, rows: int, n_steps: int, rounds: int) -> tuple[dict[str, list[float]], dict]:
    """ms per step of each way over ``rounds`` rounds (the order turning each round), and how the C++ ways'
    logits compare with the Python step's: aten's bit-equal or not; native's largest difference and how many
    rows x steps choose another token."""
    import torch

    times: dict[str, list[float]] = {way: [] for way in WAYS}
    outputs = {}
    for round_ in range(rounds):
        for way in WAYS[round_ % 3:] + WAYS[: round_ % 3]:
            with torch.inference_mode():
                enc, cache, tok = steps.start(rows)
                start = time.perf_counter()
                outputs[way] = getattr(steps, f"{way}_steps" if way != "python" else "python")(enc, cache, tok, n_steps)
                times[way].append(1000 * (time.perf_counter() - start) / n_steps)
    pairs = list(zip(outputs["python"], outputs["aten"], outputs["native"], strict=True))
    check = {
        "aten bit-equal": all(torch.equal(p, a) for p, a, _ in pairs),
        "native max |diff|": max(float((p - n).abs().max()) for p, _, n in pairs),
        "native other tokens": sum(int((p[:, -1].argmax(-1) != n[:, -1].argmax(-1)).sum()) for p, _, n in pairs),
    }
    return times, check


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", type=Path, help="an mt checkpoint (default: make bench-decode-peers's mini)")
    p.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "multi30k")
    p.add_argument("--input", type=Path, help="source lines (default: <data-dir>/test_2016_flickr.en.gz)")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 16, 64], help="rows a step")
    p.add_argument("--steps", type=int, default=20, help="decoding steps timed after step 0 (at most 30)")
    p.add_argument("--rounds", type=int, default=7, help="alternated rounds (the median counts)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--force", action="store_true", help="start even if other processes are busy")
    p.add_argument("--smoke", action="store_true", help="rows 1 and 2, 3 steps, 1 round, no busy check")
    args = p.parse_args()
    if args.smoke:
        args.rows, args.steps, args.rounds, args.force = [1, 2], 3, 1, True
    if not 1 <= args.steps <= 30 or min(args.rows + [args.rounds, args.threads]) < 1:
        p.error("--steps must be in [1, 30]; --rows, --rounds and --threads at least 1")
    args.input = args.input or args.data_dir / "test_2016_flickr.en.gz"
    return args


def main() -> None:
    args = parse_args()
    refuse_if_busy(args.force)
    import torch
    from torch.utils.cpp_extension import load

    from mt.checkpoint import load_for_inference
    from mt.model.native import NativeSteps, load_native

    torch.set_num_threads(args.threads)
    if args.ckpt is None:
        from bench_decode_peers import train_mini

        args.ckpt = train_mini(args.data_dir)
    model, tokenizers, cfg = load_for_inference(args.ckpt, pack=True, native=False)
    if (why := unsupported(cfg)) is not None:
        raise SystemExit(f"{args.ckpt}: {why}")
    opener = gzip.open if args.input.suffix == ".gz" else open
    with opener(args.input, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line, _ in zip(f, range(max(args.rows)), strict=False)]
    if len(lines) < max(args.rows):
        raise SystemExit(f"{args.input}: {len(lines)} lines, fewer than --rows {max(args.rows)}")
    print(f"compiling {SOURCE.name} (cached after the first time) ...", flush=True)
    aten = load("mt_bench_native_step", [str(SOURCE)], extra_cflags=["-O3"])
    if (built := load_native()) is None:
        raise SystemExit("mt's C++ step (mt.model.native) could not be built")
    steps = Steps(model, tokenizers, lines, aten, NativeSteps(model.decoder, built))
    print(f"commit {git_commit()}, {args.ckpt}, {args.threads} threads, {args.steps} greedy steps, "
          f"{args.rounds} alternated round(s), ms per step (medians):", flush=True)
    for rows in args.rows:
        times, check = measure(steps, rows, args.steps, args.rounds)
        medians = "  ".join(f"{way} {statistics.median(times[way]):.3f}" for way in WAYS)
        rounds = " / ".join("-".join(f"{t:.3f}" for t in one) for one in zip(*times.values(), strict=True))
        checks = ", ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}" for k, v in check.items())
        print(f"rows {rows:3d}: {medians}  (rounds {'-'.join(WAYS)} {rounds}); {checks}", flush=True)

if __name__ == "__main__":
    main()
