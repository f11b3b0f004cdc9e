"""Stage 1 of a run: the components, built from the typed config (device, ranks, data, model, optimizer).

Nothing here trains or reads a checkpoint: ``build_components`` gives freshly initialised parts
(identical weights on every rank), the resume stage then restores them, and ``step_context``
wraps the model for DDP last, once its weights are final.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.fx.experimental import _config as shape_config
from torch.nn.parallel import DistributedDataParallel

from mt.allocator import keep_freed_memory
from mt.config import Config, ConfigError
from mt.data import PAD_ID, PreparedData, TokenBatchSampler, Tokenizers, prepare_data
from mt.data.languages import data_pairs
from mt.data.pair_sampling import PairResampler
from mt.device import resolve_device
from mt.kernel_cache import bound_kernel_caches
from mt.model import build_model
from mt.train.distributed import DistInfo, barrier, init_distributed
from mt.train.init_from import start_from
from mt.train.optim import build_optimizer
from mt.train.step import StepContext

logger = logging.getLogger(__name__)


@dataclass
class Components:
    """What a run trains with; ``cfg`` is the effective config (as stored in checkpoints)."""

    cfg: Config
    device: torch.device
    dist: DistInfo
    data: PreparedData
    model: torch.nn.Module  # unwrapped (never DDP): what is saved, validated and averaged
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None  # fp16 only
    sampler: TokenBatchSampler  # this rank's shard of the training split

    @property
    def tokenizers(self) -> Tokenizers:
        return self.data.tokenizers


def build_components(cfg: Config) -> Components:
    """Device and process group, data (tokenizer, binarized splits), model, optimizer, scaler, sampler."""
    tc = cfg.train
    if tc.threads > 0:
        torch.set_num_threads(tc.threads)
    if tc.keep_freed_memory:
        keep_freed_memory()
    bound_kernel_caches(tc.kernel_cache_capacity)  # before the first bf16 matmul: read once
    device = resolve_device(tc.device, key="train.device")
    dist = init_distributed(device.type)
    if device.type == "cuda" and dist.enabled:
        device = torch.device("cuda", dist.local_rank)
    autocast_factory(tc.precision, device)  # an impossible precision fails before the data is prepared
    if tc.precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        logger.warning("train.precision=bf16 on a CPU without AVX512-BF16 or AMX: bf16 matmuls are emulated "
                       "there and can be slower than fp32; give train.precision=fp32 if tokens/s drop")
    if cfg.model.logits_bias and cfg.optim.rdrop_alpha > 0:  # mt.train.rdrop projects without the bias
        raise ConfigError([f"optim.rdrop_alpha={cfg.optim.rdrop_alpha}: R-Drop does not cover a model with "
                           "model.logits_bias=true (an imported model); use optim.rdrop_alpha=0"])
    start = None
    if tc.init_from:
        cfg, start = start_from(cfg, dist)
    data = prepare_data_once(cfg, dist)
    if not data.tokenizers.shared_vocabulary and cfg.model.share_all_embeddings:
        logger.info("separate vocabularies: tying only the decoder's input and output embeddings")
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, share_all_embeddings=False))

    torch.manual_seed(tc.seed)  # identical initial weights on every rank
    src_vocab, tgt_vocab = data.tokenizers.src.padded_vocab_size, data.tokenizers.tgt.padded_vocab_size
    model = build_model(cfg.model, src_vocab, tgt_vocab, PAD_ID)
    if start is not None:
        model.load_state_dict(start)  # a resumed run's own checkpoint replaces these (train.checkpointing)
    model = model.to(device)
    optimizer = build_optimizer(model, cfg.optim)
    scaler = torch.amp.GradScaler("cuda") if tc.precision == "fp16" else None
    train = data.splits["train"]
    sampler = TokenBatchSampler(
        train.src_lens, train.tgt_lens, cfg.data.max_tokens, seed=tc.seed, shuffle=True,
        rank=dist.rank, world_size=dist.world_size,
        pad_to_multiple=cfg.data.pad_to_multiple, shuffle_chunk=cfg.data.shuffle_chunk,
        resampler=PairResampler(train.pairs, cfg.data.pair_temperature) if len(data_pairs(cfg.data)) > 1 else None,
    )
    if len(sampler) == 0:
        raise RuntimeError(f"the training split of {cfg.data.source!r} yields no batches")
    return Components(cfg, device, dist, data, model, optimizer, scaler, sampler)


def prepare_data_once(cfg: Config, dist: DistInfo) -> PreparedData:
    """Rank 0 trains the tokenizer and binarizes; the other ranks then read its cache."""
    if dist.is_main:
        data = prepare_data(cfg.data)
    barrier(dist)
    if not dist.is_main:
        data = prepare_data(cfg.data)
    return data


def seed_ranks(seed: int, dist: DistInfo) -> None:
    """Different dropout per rank; used only when no checkpoint restored the generators."""
    torch.manual_seed(seed + 1000 * dist.rank)
    random.seed(seed + 1000 * dist.rank)


def step_context(parts: Components) -> StepContext:
    """What ``train_step`` needs; the model is wrapped in DDP here, after any resume."""
    cfg = parts.cfg
    wrapped: torch.nn.Module = parts.model
    if parts.dist.enabled:
        ids = [parts.device.index] if parts.device.type == "cuda" else None
        wrapped = DistributedDataParallel(parts.model, device_ids=ids)
    if cfg.train.compile:
        # Dynamic shapes: batches differ in sentences and length, and one graph serves them all.
        # Validation, decoding and checkpoints use the eager ``parts.model`` (the same parameters).
        # No duck sizing: a first batch whose source and target happen to share a padded length would
        # otherwise compile a graph that assumes they always do, and the next batch would compile again.
        # (A process-wide setting: a training process compiles nothing else.)
        shape_config.use_duck_shape = False
        wrapped = torch.compile(wrapped, dynamic=True)
    return StepContext(
        model=wrapped, output_weight=parts.model.decoder.output_weight, optimizer=parts.optimizer,
        logits_bias=parts.model.decoder.logits_bias,
        dist=parts.dist, device=parts.device,
        label_smoothing=cfg.optim.label_smoothing, pad_id=PAD_ID, clip_norm=cfg.optim.clip_norm,
        autocast=autocast_factory(cfg.train.precision, parts.device), scaler=parts.scaler,
        rdrop_alpha=cfg.optim.rdrop_alpha,
    )


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX), where bf16 training pays off."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's probes (private API)
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def autocast_factory(precision: str, device: torch.device) -> Callable[[], contextlib.AbstractContextManager]:
    """A zero-argument context-manager factory for the forward passes of ``precision``."""
    if precision == "fp32":
        return contextlib.nullcontext
    if precision not in ("bf16", "fp16"):
        raise ValueError(f"train.precision must be fp32, bf16 or fp16, got {precision!r}")
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("train.precision=fp16 needs CUDA; use bf16 on CPU")
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)
