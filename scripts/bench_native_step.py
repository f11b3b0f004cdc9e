"""What the Python of a decoding step costs: mt's cached decoder step against the same ATen calls made from C++.

    python scripts/bench_native_step.py [--ckpt PATH] [--rows 1 16 64] [--steps 20] [--rounds 7] [--threads 2]
                                        [--force] [--smoke]

``scripts/bench_step_cost.py`` finds that a step of a small model costs mt about 1.3 ms more than CTranslate2
whatever its rows, and suspects the Python between the operator calls. This measures it. The decoder layers
of a greedy step run two ways on the same cache, in one process, alternated round by round:

- **python**: ``model.decode`` (mt's fast step, ``DecoderLayer.step``);
- **native**: ``scripts/native_step.cpp``, compiled on first use by ``torch.utils.cpp_extension`` (a C++
  compiler needed), which makes the same ATen calls in the same order for every layer, so its logits must
  equal the Python step's bit for bit (checked, and printed).

Both embed the tokens, apply the final norm and project in Python; only the layers differ. The first lines
of ``--input`` are encoded and decoded greedily for ``--steps`` steps at each row count in ``--rows``; a step
is the median over ``--rounds`` of the steps' mean time. The C++ step covers what this script checks (plain
float32 linears, fused QKV, LayerNorm, ReLU, Post-LN or Pre-LN, no RoPE, qk-norm or GQA) and is not mt's decoder:
it exists to measure. The checkpoint defaults to ``make bench-decode-peers``'s mini (the paper's model after
1,000 updates, trained once into ``runs/bench_decode_mini``). ``--smoke`` (the test's): rows 1 and 2, 3 steps,
1 round, no busy check.
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
    """The two ways of decoding ``steps`` greedy steps of ``rows`` sentences from the same start."""

    def __init__(self, model, tokenizers, lines: list[str], native) -> None:
        self.model, self.tokenizers, self.lines, self.native = model, tokenizers, lines, native
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
        out = []
        for _ in range(steps):
            logits = self.model.decode(tok, enc, cache)  # (rows, 1, V)
            out.append(logits)
            tok = logits[:, -1].argmax(-1, keepdim=True)
        return out

    def native_steps(self, enc, cache, tok, steps: int) -> list:
        keys = [layer.self_attn.keys for layer in cache.layers]
        values = [layer.self_attn.values for layer in cache.layers]
        cross_k, cross_v = [layer.cross_k for layer in cache.layers], [layer.cross_v for layer in cache.layers]
        mask = cache.source_bias(keys[0].dtype)  # (rows, 1, 1, S)
        out = []
        for _ in range(steps):
            length = cache.length
            x = self.decoder.embedding(tok, length)  # (rows, 1, D)
            h = self.native.decoder_step(x, self.weights, keys, values, length, cross_k, cross_v, mask,
                                         self.heads, self.pre_ln)
            for layer in cache.layers:
                layer.self_attn.length = length + 1
            if self.decoder.final_norm is not None:
                h = self.decoder.final_norm(h)
            logits = self.decoder.project(h)
            out.append(logits)
            tok = logits[:, -1].argmax(-1, keepdim=True)
        return out


def measure(steps: Steps, rows: int, n_steps: int, rounds: int) -> tuple[dict[str, list[float]], bool]:
    """ms per step of each way over ``rounds`` alternated rounds, and whether their logits were equal."""
    import torch

    times: dict[str, list[float]] = {"python": [], "native": []}
    outputs = {}
    for round_ in range(rounds):
        order = ("python", "native") if round_ % 2 == 0 else ("native", "python")
        for way in order:
            run = steps.python if way == "python" else steps.native_steps
            with torch.inference_mode():
                enc, cache, tok = steps.start(rows)
                start = time.perf_counter()
                outputs[way] = run(enc, cache, tok, n_steps)
                times[way].append(1000 * (time.perf_counter() - start) / n_steps)
    same = all(torch.equal(a, b) for a, b in zip(outputs["python"], outputs["native"], strict=True))
    return times, same


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

    torch.set_num_threads(args.threads)
    if args.ckpt is None:
        from bench_decode_peers import train_mini

        args.ckpt = train_mini(args.data_dir)
    model, tokenizers, cfg = load_for_inference(args.ckpt, pack=True)
    if (why := unsupported(cfg)) is not None:
        raise SystemExit(f"{args.ckpt}: {why}")
    opener = gzip.open if args.input.suffix == ".gz" else open
    with opener(args.input, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line, _ in zip(f, range(max(args.rows)), strict=False)]
    if len(lines) < max(args.rows):
        raise SystemExit(f"{args.input}: {len(lines)} lines, fewer than --rows {max(args.rows)}")
    print(f"compiling {SOURCE.name} (cached after the first time) ...", flush=True)
    native = load("mt_bench_native_step", [str(SOURCE)], extra_cflags=["-O3"])
    steps = Steps(model, tokenizers, lines, native)
    print(f"commit {git_commit()}, {args.ckpt}, {args.threads} threads, {args.steps} greedy steps, "
          f"{args.rounds} alternated round(s), ms per step (medians):", flush=True)
    for rows in args.rows:
        times, same = measure(steps, rows, args.steps, args.rounds)
        py, nat = statistics.median(times["python"]), statistics.median(times["native"])
        rounds = " / ".join(f"{a:.3f}-{b:.3f}" for a, b in zip(times["python"], times["native"], strict=True))
        print(f"rows {rows:3d}: python {py:.3f}  native {nat:.3f}  (saves {py - nat:.3f} ms, "
              f"{100 * (py - nat) / py:.0f}%; rounds python-native {rounds}); logits bit-equal: {same}", flush=True)


if __name__ == "__main__":
    main()
