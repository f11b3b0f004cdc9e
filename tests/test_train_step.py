"""One update = the gradient of one large batch, however it is split (accumulation, ranks)."""

import contextlib
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mt.config import ModelConfig, OptimConfig
from mt.data import BOS_ID, EOS_ID, PAD_ID, Batch
from mt.model import build_model
from mt.train.distributed import DistInfo
from mt.train.optim import build_optimizer, set_lr
from mt.train.step import StepContext, train_step

VOCAB = 40
MODEL = ModelConfig(encoder_layers=1, decoder_layers=1, d_model=32, d_ff=64, heads=4, dropout=0.0)


def make_batch(pairs: list[tuple[list[int], list[int]]]) -> Batch:
    """A padded Batch from (source ids, target ids) pairs, built independently of mt.data.collate."""
    S = max(len(s) for s, _ in pairs) + 1
    T = max(len(t) for _, t in pairs) + 1
    src = torch.full((len(pairs), S), PAD_ID)
    tgt_in = torch.full((len(pairs), T), PAD_ID)
    tgt_out = torch.full((len(pairs), T), PAD_ID)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s) + 1] = torch.tensor(s + [EOS_ID])
        tgt_in[i, : len(t) + 1] = torch.tensor([BOS_ID] + t)
        tgt_out[i, : len(t) + 1] = torch.tensor(t + [EOS_ID])
    return Batch(
        src=src, src_pad_mask=src.eq(PAD_ID), tgt_in=tgt_in, tgt_out=tgt_out, tgt_pad_mask=tgt_out.eq(PAD_ID),
        ntokens=int(tgt_out.ne(PAD_ID).sum()), ids=torch.arange(len(pairs)),
    )


def random_pairs(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ls, lt = torch.randint(2, 9, (2,), generator=g).tolist()
        out.append((torch.randint(4, VOCAB, (ls,), generator=g).tolist(),
                    torch.randint(4, VOCAB, (lt,), generator=g).tolist()))
    return out


def fresh(seed: int = 0, adam: bool = False):
    """A seeded tiny model with SGD by default: parameters then differ exactly as gradients do.

    (Adam with eps=1e-9 turns float noise on gradients that are zero in exact arithmetic, such as
    the attention key bias's, into full-size steps, so it cannot compare two summation orders.)
    """
    torch.manual_seed(seed)
    model = build_model(MODEL, VOCAB, VOCAB, PAD_ID)
    if adam:
        optimizer = build_optimizer(model, OptimConfig())
        set_lr(optimizer, 1e-3)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    return model, optimizer


def context(model, optimizer, info: DistInfo | None = None) -> StepContext:
    info = info or DistInfo()
    return StepContext(model=model, output_weight=getattr(model, "module", model).decoder.output_weight,
                       optimizer=optimizer, dist=info, device=torch.device("cpu"),
                       label_smoothing=0.1, pad_id=PAD_ID, clip_norm=0.0, autocast=contextlib.nullcontext)


def test_update_freq_2_equals_one_batch_holding_both():
    a, b = random_pairs(3, seed=1), random_pairs(5, seed=2)
    m1, o1 = fresh()
    m2, o2 = fresh()
    for _ in range(3):
        r1 = train_step(context(m1, o1), [make_batch(a), make_batch(b)])
        r2 = train_step(context(m2, o2), [make_batch(a + b)])
        assert r1.ntokens == r2.ntokens
        assert abs(r1.loss_sum - r2.loss_sum) < 1e-3
    for (name, p1), p2 in zip(m1.named_parameters(), m2.parameters(), strict=True):
        assert torch.allclose(p1, p2, atol=1e-6), name


def test_nonfinite_gradient_skips_the_update():
    model, opt = fresh(adam=True)
    before = [p.detach().clone() for p in model.parameters()]
    handle = model.register_forward_hook(lambda mod, inp, out: out * float("nan"))
    result = train_step(context(model, opt), [make_batch(random_pairs(2, 3))])
    handle.remove()
    assert result.skipped == "nonfinite"
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))


def _ddp_worker(rank: int, world: int, init_file: str, out_path: str, batches_per_rank) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model, opt = fresh()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ctx = context(ddp, opt, DistInfo(rank=rank, world_size=world))
    for step_batches in batches_per_rank[rank]:
        train_step(ctx, [make_batch(p) for p in step_batches])
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out_path)
    dist.destroy_process_group()


def test_two_gloo_ranks_equal_one_process_seeing_both_batches(tmp_path):
    updates = 3
    # rank r, update u: micro-batches of different sizes (so token counts differ across ranks)
    per_rank = [[[random_pairs(2 + r, seed=10 * u + r)] for u in range(updates)] for r in range(2)]
    init_file = tempfile.mktemp(dir=tmp_path)
    out = str(tmp_path / "rank0.pt")
    mp.spawn(_ddp_worker, args=(2, init_file, out, per_rank), nprocs=2, join=True)
    ddp_params = torch.load(out, weights_only=True)

    model, opt = fresh()
    for u in range(updates):
        train_step(context(model, opt), [make_batch(per_rank[0][u][0]), make_batch(per_rank[1][u][0])])
    for name, value in model.state_dict().items():
        assert torch.allclose(ddp_params[name], value, atol=1e-5), name


def test_cpu_has_native_bf16_reads_torchs_probes(monkeypatch):
    from mt.train.setup import cpu_has_native_bf16

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert not cpu_has_native_bf16()
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert cpu_has_native_bf16()
