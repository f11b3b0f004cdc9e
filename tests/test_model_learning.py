"""A tiny model learns to copy and to reverse short sequences (end-to-end: forward, loss, cached greedy)."""

import time

import pytest
import torch
import torch.nn.functional as F

from mt.config import ModelConfig
from mt.model import Seq2SeqTransformer, build_model

PAD, BOS, EOS = 0, 2, 3
SYMBOLS = 10  # token ids 4 .. 13
VOCAB = 16


def make_batch(task: str, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Random sequences of 3..6 symbols: src = x + [EOS], tgt_in = [BOS] + y, tgt_out = y + [EOS]."""
    lengths = torch.randint(3, 7, (batch,), generator=generator).tolist()
    xs = [torch.randint(4, 4 + SYMBOLS, (n,), generator=generator).tolist() for n in lengths]
    ys = [x if task == "copy" else x[::-1] for x in xs]

    def pad(rows: list[list[int]]) -> torch.Tensor:
        width = max(len(r) for r in rows)
        return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])

    src = pad([x + [EOS] for x in xs])
    return src, src.eq(PAD), pad([[BOS] + y for y in ys]), pad([y + [EOS] for y in ys])


@torch.no_grad()
def greedy(
    model: Seq2SeqTransformer, src: torch.Tensor, src_pad_mask: torch.Tensor, max_len: int
) -> torch.Tensor:
    enc, cache = model.encode(src, src_pad_mask), model.new_cache()
    tokens = torch.full((src.size(0), 1), BOS)
    for _ in range(max_len):
        next_token = model.decode(tokens[:, -1:], enc, cache)[:, -1].argmax(-1)  # (B,)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
    return tokens[:, 1:]


@pytest.mark.parametrize("task", ["copy", "reverse"])
def test_tiny_model_learns(task: str) -> None:
    cfg = ModelConfig(encoder_layers=2, decoder_layers=2, d_model=64, d_ff=128, heads=4, dropout=0.0)
    model = build_model(cfg, VOCAB, VOCAB)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(0)
    steps = 400
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / 50) * (1 - step / steps)
    )
    started = time.perf_counter()
    for _ in range(steps):
        src, src_mask, tgt_in, tgt_out = make_batch(task, 64, generator)
        logits = model(src, src_mask, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    print(f"{task}: loss {loss.item():.4f} after {time.perf_counter() - started:.1f} s")

    model.eval()
    src, src_mask, _, tgt_out = make_batch(task, 200, torch.Generator().manual_seed(1))
    hyps = greedy(model, src, src_mask, max_len=tgt_out.size(1))
    exact = [
        h[: (t != PAD).sum()].tolist() == t[t != PAD].tolist() for h, t in zip(hyps, tgt_out, strict=True)
    ]
    assert sum(exact) == len(exact), f"{task}: {sum(exact)}/{len(exact)} exact, last loss {loss.item():.4f}"
