"""Typed configuration: one dataclass per Hydra group (``conf/<group>/*.yaml``).

The dataclasses are registered in Hydra's ConfigStore as schemas, so an unknown key or a value of
the wrong type fails when the config is composed, not deep inside training; ``to_config`` then checks the
values against the rules in ``mt/config_rules.py`` (``validate``). Everything below the
entry points takes these dataclasses (or plain scalars), never a ``DictConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mt.config_rules import group_problems, problems
from mt.errors import UserError


class ConfigError(UserError):
    """Config values that cannot work: ``group.key=value: what is allowed``, one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        lines = problems if len(problems) == 1 else [f"{len(problems)} config values are invalid:", *problems]
        super().__init__("\n  ".join(lines))
        self.problems = problems


@dataclass
class DemoConfig:
    """The embedded offline corpus: English number words -> German number words (num2words)."""

    train_size: int = 20000
    valid_size: int = 500
    test_size: int = 1000
    min_number: int = 0
    max_number: int = 999_999
    max_numbers_per_line: int = 3  # each line lists 1..k numbers ("; "-separated), so BLEU has n-grams
    seed: int = 1


@dataclass
class HubConfig:
    """A Hugging Face hub dataset (needs a network); rows hold ``translation: {src_lang: .., tgt_lang: ..}``."""

    name: str | None = None  # e.g. "wmt14" or a local dataset directory
    config: str | None = None  # e.g. "de-en"
    train_split: str = "train"
    valid_split: str = "validation"
    test_split: str = "test"


@dataclass
class DataConfig:
    """Where the parallel text comes from, how it is tokenized, filtered and batched."""

    source: str = "demo"  # demo | files | hub
    dir: str | None = None  # for source=files: directory holding PREFIX.SRC / PREFIX.TGT (or .gz)
    format: str = "parallel"  # for source=files: parallel | tsv | jsonl
    src_lang: str = "en"
    tgt_lang: str = "de"
    # several directions in one model, e.g. [en-de,en-fr,en-cs] (overrides src_lang/tgt_lang); with more
    # than one target language each source starts with a target tag (>>de<<); see mt.data.languages
    pairs: Any = field(default_factory=list)
    pair_temperature: float = 1.0  # pair sampling probability ~ size^(1/T): 1 = by size, large = uniform
    # one prefix or a list, read in order as one split: [europarl,commoncrawl,news_commentary]
    # (Any: OmegaConf rejects a str for a list field and cannot type a str | list union)
    train_prefix: Any = "train"
    # parallel files PREFIX.SRC / PREFIX.TGT (plain or .gz; a prefix absolute or relative to the working
    # directory) read after the training split, whatever data.source and data.format are (mt.train.distill)
    extra_train: list[str] = field(default_factory=list)
    valid_prefix: str = "val"
    test_prefix: str = "test"
    demo: DemoConfig = field(default_factory=DemoConfig)
    hub: HubConfig = field(default_factory=HubConfig)
    # tokenizer: trained on the training split, or reused from a directory holding spm.model (joint) or
    # src.model + tgt.model (another run's vocabulary: data.vocab_size and data.joint_vocab then do not apply)
    tokenizer: str | None = None
    vocab_size: int = 8000  # rounded up to a multiple of 8 in the model
    joint_vocab: bool = True
    character_coverage: float = 1.0
    tokenizer_sample_size: int = 2_000_000  # sentences fed to SentencePiece training at most
    # filtering (training split only)
    max_len: int = 256
    max_len_ratio: float = 3.0
    # subword regularisation (training batches only): BPE-dropout probability, 0 = off
    subword_sampling: float = 0.0
    # batching
    max_tokens: int = 4096
    pad_to_multiple: int = 8
    shuffle_chunk: int = 100  # batches' worth of examples sorted together inside a shuffled chunk
    cache_dir: str = "data/cache"
    num_workers: int = 2  # processes for binarization


@dataclass
class ModelConfig:
    """Transformer encoder-decoder hyper-parameters (Vaswani et al. 2017, Table 3)."""

    name: str = "transformer_small"
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_model: int = 256
    d_ff: int = 1024
    heads: int = 4
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"  # relu | gelu | silu (OPUS-MT's "swish") | swiglu (gated FFN, Shazeer 2020)
    swiglu_hidden: int = 0  # swiglu's hidden size; 0 = 2 * d_ff / 3 rounded to a multiple of 8
    pre_ln: bool = False  # False = Post-LN, as in the paper
    norm: str = "layernorm"  # layernorm | rmsnorm
    positions: str = "sinusoidal"  # sinusoidal | learned | rope (rotary, in self-attention)
    # sinusoidal frequencies, both laid out as [sin | cos] halves: fairseq 10000^(-i/(D/2-1)) | marian 10000^(-2i/D)
    sinusoid: str = "fairseq"
    # sinusoidal positions count from this number: 0 = the first token is position 0; M2M-100 / NLLB (fairseq's
    # padding_idx + 1): 2
    position_offset: int = 0
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model) (section 3.4)
    # a fixed bias on the output logits (V,), not trained: an imported model's final_logits_bias, with -inf on the
    # rows the original model has no output for (mt.pretrained)
    logits_bias: bool = False
    kv_heads: int = 0  # key/value heads; 0 = heads, 1 = multi-query, a divisor of heads = grouped-query
    qk_norm: bool = False  # RMSNorm on each head's queries and keys
    max_positions: int = 1024
    share_all_embeddings: bool = True  # needs a joint vocabulary; else decoder in/out tying only
    # the output projection is the target embedding (section 3.4); false: a matrix of its own (an imported model's
    # untied lm_head)
    tie_output: bool = True


@dataclass
class OptimConfig:
    """Adam with warmup; ``schedule`` picks the paper's formula or inverse-sqrt with a peak lr."""

    schedule: str = "noam"  # noam | inverse_sqrt
    lr_scale: float = 1.0  # noam: lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    lr: float = 5e-4  # inverse_sqrt: peak lr reached at the end of warmup
    warmup_updates: int = 4000
    warmup_init_lr: float = 0.0
    # none | linear | cosine: multiply the lr by a factor falling from 1 to 0 over the training budget
    # (train.max_updates or train.max_time_minutes, whichever ends first)
    budget_decay: str = "none"
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0 = no clipping
    label_smoothing: float = 0.1
    # R-Drop (Liang et al. 2021; mt.train.rdrop): > 0 runs each batch twice and adds alpha times the
    # symmetric KL between the two copies' outputs; about twice the compute per update. 0 = off.
    rdrop_alpha: float = 0.0
    fused: bool = False  # torch's fused Adam kernel (CPU and CUDA) instead of one op per parameter tensor


@dataclass
class LaterMembersConfig:
    """``train.later_members``: fields of the model and optim groups that differ for every member after the
    first (``train.members`` > 1), e.g. ``{model: {d_model: 256}, optim: {warmup_updates: 1000}}``."""

    model: dict[str, Any] = field(default_factory=dict)
    optim: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainConfig:
    """The training loop: length, accumulation, precision, checkpoints, validation, logging."""

    run_dir: str = MISSING  # set by conf/config.yaml from the experiment name
    seed: int = 1
    max_updates: int = 100_000
    max_epochs: int = 0  # 0 = no limit
    max_time_minutes: float = 0.0  # 0 = no limit; stops cleanly with a checkpoint
    update_freq: int = 1  # gradient accumulation
    precision: str = "fp32"  # fp32 | bf16 | fp16 (fp16 on CUDA only)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int = 0  # 0 = torch default
    compile: bool = False  # torch.compile the training forward (dynamic shapes); compile time is logged
    keep_freed_memory: bool = True  # glibc: reuse freed blocks, no munmap + page faults every step
    kernel_cache_capacity: int = 32  # bf16 matmul kernels oneDNN and ideep keep on CPU; -1 = theirs (1024)
    log_every: int = 20
    validate_every: int = 1000
    valid_bleu: bool = True  # decode the valid set at each validation (sacreBLEU)
    valid_beam_size: int = 1  # 1 = greedy (fast); the decode group's settings otherwise
    valid_bleu_max_sentences: int = 0  # 0 = the whole valid set
    best_metric: str = "bleu"  # bleu | loss
    patience: int = 0  # validations without improvement before stopping (0 = off)
    keep_last: int = 3
    save_every: int = 1000
    average_last: int = 0  # average the last N checkpoints at the end (0 = off)
    # validate and checkpoint an exponential moving average of the weights with this decay (0 = off; mt.train.ema)
    ema_decay: float = 0.0
    max_nonfinite_in_a_row: int = 10
    samples: int = 5  # sample translations printed at the end
    test_at_end: bool = True  # translate the test split with the best checkpoint and print sacreBLEU
    # >1: that many models one after another (seeds seed, seed+1, ...), each max_time_minutes / members,
    # tested as one ensemble (mt.train.members)
    members: int = 1
    # a member's least budget: when max_time_minutes / members is below it, as many members train as get it
    # (at least one model); 0 = off
    member_min_minutes: float = 0.0
    # members after the first train on the original pairs plus the first member's translations of the training
    # sources, with its vocabulary (sequence-level knowledge distillation; mt.train.distill)
    distill: bool = False
    # what the members after the first change in their model and optim groups (another architecture: a more
    # diverse ensemble), e.g. +train.later_members.model.d_model=256
    later_members: LaterMembersConfig = field(default_factory=LaterMembersConfig)
    # a checkpoint of this model on this data that the run goes on from (weights, optimizer moments, data
    # position, random state) with its update count, clock and lr schedule at 0: a warm restart; "" = none
    restart_from: str = ""
    # a checkpoint (mt's own, or one mt-import wrote) that a new run starts from: its model (architecture and
    # weights; dropout from this run's model group) and its tokenizers, on this run's data encoded with them
    # (nothing retrained); optimizer, lr schedule and update count start afresh (EXP=finetune); "" = none
    init_from: str = ""
    progress: bool = True  # tqdm progress bar
    tensorboard: bool = True


@dataclass
class DecodeConfig:
    """Search settings for translate, eval and validation BLEU."""

    strategy: str = "beam"  # beam | greedy | sample
    beam_size: int = 4
    nbest: int = 1
    length_penalty: str = "gnmt"  # gnmt: ((5+|Y|)/6)^alpha | length: |Y|^alpha | none
    alpha: float = 0.6
    max_len_a: float = 1.0  # max output length = a * |src| + b
    max_len_b: int = 50
    min_len: int = 1  # EOS banned before this many pieces (1: a non-empty source never gets an empty output)
    stopping: str = "topk_eos"  # beam: topk_eos (OpenNMT: top beam finished) | exact | fairseq (K finished)
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 1
    max_tokens: int = 8000  # batching budget (source tokens x beam) for decoding
    max_sentences: int = 64
    # continuous batching (sentences join a batch as others finish) for: greedy | all (beam too) | none;
    # the Python search's (the C++ search of mt.model.native decodes each batch whole)
    refill: str = "greedy"
    on_too_long: str = "truncate"  # truncate | reject


@dataclass
class Config:
    """The root config composed by Hydra from ``conf/config.yaml``."""

    name: str = "demo"  # experiment name; runs go to runs/<name>
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)


_GROUPS = {"data": DataConfig, "model": ModelConfig, "optim": OptimConfig, "train": TrainConfig, "decode": DecodeConfig}


def register_configs() -> None:
    """Register the schemas so Hydra validates every group file against its dataclass."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schema in _GROUPS.items():
        cs.store(group=group, name=f"base_{group}", node=schema)


def validate(cfg: Config) -> Config:
    """``cfg`` unchanged if every value rule holds, else ``ConfigError`` listing each broken rule."""
    found = problems(cfg)
    if found:
        raise ConfigError(found)
    return cfg


def validate_group(name: str, group: Any) -> Any:
    """The same for one group's dataclass, e.g. a ``DecodeConfig`` after command-line flags were applied."""
    found = group_problems(name, group)
    if found:
        raise ConfigError(found)
    return group


def upgrade_stored_config(cfg: Any) -> Any:
    """A config stored by an older version, in today's fields (a copy; ``cfg`` itself is not changed).

    ``model.learned_positions: bool`` became ``model.positions``: true -> ``learned``, false -> the default.
    """
    model = cfg.get("model") if hasattr(cfg, "get") else None
    if model is None or "learned_positions" not in model:
        return cfg
    cfg = OmegaConf.to_container(cfg) if not isinstance(cfg, dict) else {**cfg}
    model = {**cfg["model"]}
    if model.pop("learned_positions"):
        model["positions"] = "learned"
    cfg["model"] = model
    return cfg


def to_config(cfg: Any) -> Config:
    """Turn a composed DictConfig (or a plain dict from a checkpoint) into a typed, validated ``Config``."""
    merged = OmegaConf.merge(OmegaConf.structured(Config), upgrade_stored_config(cfg))
    return validate(OmegaConf.to_object(merged))  # type: ignore[arg-type]


def with_changes(cfg: Config, changes: dict[str, dict[str, Any]], key: str) -> Config:
    """``cfg`` with ``changes`` ({group: {field: value}}) applied and validated; an unknown field or a bad value
    is a ``ConfigError`` naming ``key`` (the setting the changes came from)."""
    if not any(changes.values()):
        return cfg
    try:
        return to_config(OmegaConf.merge(to_dict(cfg), changes))
    except OmegaConfBaseException as e:
        raise ConfigError([f"{key}: {str(e).splitlines()[0]}"]) from None
    except ConfigError as e:
        raise ConfigError([f"{key}: {problem}" for problem in e.problems]) from None


def to_dict(cfg: Config) -> dict[str, Any]:
    """A plain, picklable-as-data dict of the config (stored in checkpoints)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def compose(overrides: list[str] | None = None) -> Config:
    """Compose ``conf/config.yaml`` with Hydra overrides outside a Hydra app (scripts, tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return to_config(hydra_compose(config_name="config", overrides=list(overrides or [])))
