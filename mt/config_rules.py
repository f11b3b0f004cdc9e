"""The value rules of the typed config, one table per group, checked when the config is composed.

Hydra's schemas catch unknown keys and wrong types; these rules catch values of the right type that
cannot work (``train.validate_every=0``, ``model.heads=3`` with ``d_model=32``, ``decode.top_p=1.5``).
Each rule names its key and says what is allowed; ``problems`` returns one line per broken rule, as
``group.key=value: what is allowed``. ``mt.config.validate`` raises them as one ``ConfigError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """``ok(value, group)`` says whether ``group.<key>`` is valid; ``allowed`` may cite ``{g.<field>}``."""

    key: str
    ok: Callable[[Any, Any], bool]
    allowed: str

    def problem(self, group_name: str, group: Any) -> str | None:
        """``"group.key=value: allowed"`` when the rule is broken, else None (also for a field not present)."""
        if not hasattr(group, self.key):  # a field another branch adds later (e.g. decode.min_len)
            return None
        value = getattr(group, self.key)
        if self.ok(value, group):
            return None
        return f"{group_name}.{self.key}={_show(value)}: {self.allowed.format(g=group)}"


def _show(value: Any) -> str:
    """A value as one would write it in a Hydra override."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(_show, value)) + "]"
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _why(why: str) -> str:
    return f" ({why})" if why else ""


def positive(key: str, why: str = "") -> Rule:
    return Rule(key, lambda v, g: v > 0, f"must be > 0{_why(why)}")


def at_least(key: str, low: float, why: str = "") -> Rule:
    return Rule(key, lambda v, g: v >= low, f"must be >= {low}{_why(why)}")


def fraction(key: str, why: str = "") -> Rule:
    """``0 <= value < 1`` (dropout, label smoothing)."""
    return Rule(key, lambda v, g: 0 <= v < 1, f"must be in [0, 1){_why(why)}")


def one_of(key: str, choices: Sequence[str]) -> Rule:
    return Rule(key, lambda v, g: v in choices, "must be one of " + " | ".join(choices))


_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def _prefix_or_prefixes(value: Any) -> bool:
    """A non-empty str, or a non-empty list (or tuple) of non-empty strs."""
    if isinstance(value, str):
        return value != ""
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, str) and v for v in value)


# also applied by mt.data.sources.train_prefixes, for a DataConfig built without composing
TRAIN_PREFIX_RULE = Rule(
    "train_prefix",
    lambda v, g: _prefix_or_prefixes(v),
    "must be a file prefix or a non-empty list of them, e.g. train or [europarl,commoncrawl,news_commentary]",
)

RULES: dict[str, list[Rule]] = {
    "data": [
        one_of("source", ("demo", "files", "hub")),
        one_of("format", ("parallel", "tsv", "jsonl")),
        TRAIN_PREFIX_RULE,
        Rule("extra_train", lambda v, g: all(isinstance(p, str) and p for p in v),
             "must be a list of file prefixes of parallel files, e.g. [/data/backtranslated] ([] = none)"),
        positive("vocab_size", "SentencePiece pieces, specials included"),
        Rule("character_coverage", lambda v, g: 0 < v <= 1, "must be in (0, 1] (share of characters covered)"),
        positive("tokenizer_sample_size", "sentences fed to tokenizer training"),
        positive("max_len", "pieces per side; longer training pairs are dropped"),
        at_least("max_len_ratio", 1, "longer side / shorter side; pairs above it are dropped"),
        Rule(
            "pairs",
            lambda v, g: isinstance(v, (list, tuple)) and all(isinstance(p, str) for p in v),
            "must be a list of language pairs, e.g. [en-de,en-fr,en-cs] ([] = src_lang-tgt_lang)",
        ),
        positive("pair_temperature", "pair sampling probability ~ size^(1/T)"),
        Rule(
            "joint_vocab",
            lambda v, g: v or not isinstance(g.pairs, list | tuple)
            or len({str(p).split("-")[-1] for p in g.pairs}) < 2,
            "must be true for several target languages in data.pairs (one vocabulary holds every language and tag)",
        ),
        fraction("subword_sampling", "BPE-dropout probability of training batches; 0 = off"),
        positive("max_tokens", "tokens per batch"),
        at_least("pad_to_multiple", 1, "1 = no padding to a multiple"),
        positive("shuffle_chunk", "batches' worth of examples sorted together"),
        at_least("num_workers", 0),
    ],
    "model": [
        positive("encoder_layers"),
        positive("decoder_layers"),
        positive("d_model"),
        positive("d_ff"),
        positive("heads"),
        Rule("heads", lambda v, g: v <= 0 or g.d_model % v == 0, "must divide model.d_model={g.d_model}"),
        fraction("dropout"),
        fraction("attention_dropout"),
        fraction("activation_dropout"),
        one_of("activation", ("relu", "gelu", "silu", "swiglu")),
        at_least("swiglu_hidden", 0, "0 = 2 * d_ff / 3 rounded to a multiple of 8"),
        one_of("norm", ("layernorm", "rmsnorm")),
        one_of("positions", ("sinusoidal", "learned", "rope")),
        Rule(
            "positions",
            lambda v, g: v != "rope" or g.heads <= 0 or g.d_model % g.heads or (g.d_model // g.heads) % 2 == 0,
            "needs an even head dimension, model.d_model / model.heads = {g.d_model} / {g.heads}",
        ),
        one_of("sinusoid", ("fairseq", "marian")),
        Rule(
            "sinusoid",
            lambda v, g: v == "fairseq" or g.positions == "sinusoidal",
            "applies to model.positions=sinusoidal only (positions={g.positions})",
        ),
        at_least("position_offset", 0, "the position of the first token; 0 = mt's own models"),
        Rule(
            "position_offset",
            lambda v, g: v == 0 or g.positions == "sinusoidal",
            "applies to model.positions=sinusoidal only (positions={g.positions})",
        ),
        at_least("kv_heads", 0, "0 = model.heads"),
        Rule(
            "kv_heads",
            lambda v, g: v <= 0 or g.heads <= 0 or g.heads % v == 0,
            "must divide model.heads={g.heads} (0 = heads, 1 = multi-query)",
        ),
        positive("max_positions", "longest sequence the model accepts"),
    ],
    "optim": [
        one_of("schedule", ("noam", "inverse_sqrt")),
        positive("lr", "inverse_sqrt: the peak learning rate"),
        positive("lr_scale", "noam: the factor of the paper's formula"),
        # >= 1, not >= 0: both schedules divide by it (noam) or scale by sqrt(warmup / step); 1 = no warmup
        at_least("warmup_updates", 1, "updates of linear warmup; 1 = none"),
        at_least("warmup_init_lr", 0),
        one_of("budget_decay", ("none", "linear", "cosine")),
        Rule("betas", lambda v, g: len(v) == 2 and all(0 <= b < 1 for b in v), "must be two values in [0, 1)"),
        positive("eps"),
        at_least("weight_decay", 0),
        at_least("clip_norm", 0, "0 = no clipping"),
        fraction("label_smoothing"),
        at_least("rdrop_alpha", 0, "0 = off"),
    ],
    "train": [
        Rule("init_from", lambda v, g: v != "REQUIRED", "give the checkpoint to start from: train.init_from=model.pt"),
        positive("max_updates"),
        at_least("max_epochs", 0, "0 = no limit"),
        at_least("max_time_minutes", 0, "0 = no limit"),
        at_least("update_freq", 1, "batches accumulated per update"),
        one_of("precision", ("fp32", "bf16", "fp16")),
        Rule("device", lambda v, g: _DEVICE.fullmatch(v) is not None, "must be one of auto | cpu | cuda | cuda:N"),
        at_least("threads", 0, "0 = torch default"),
        Rule(
            "kernel_cache_capacity",
            lambda v, g: v == -1 or v >= 1,
            "must be >= 1 (bf16 kernels kept; 0 crashes torch's ideep), or -1 (oneDNN's and ideep's own, 1024)",
        ),
        at_least("log_every", 1, "log every N updates"),
        positive("validate_every", "validate every N updates"),
        at_least("valid_beam_size", 1, "1 = greedy"),
        at_least("valid_bleu_max_sentences", 0, "0 = the whole valid set"),
        one_of("best_metric", ("bleu", "loss")),
        at_least("patience", 0, "0 = off"),
        at_least("keep_last", 0, "0 = keep every checkpoint"),
        positive("save_every", "save a checkpoint every N updates"),
        at_least("average_last", 0, "0 = off"),
        Rule(
            "average_last",
            lambda v, g: v <= 0 or g.keep_last <= 0 or v <= g.keep_last,
            "must be <= train.keep_last={g.keep_last} (only that many checkpoints are kept to average), or 0 (off)",
        ),
        Rule("ema_decay", lambda v, g: 0 <= v < 1,
             "must be in [0, 1) (0 = off; e.g. 0.999: about the last 1,000 updates)"),
        at_least("max_nonfinite_in_a_row", 1),
        at_least("samples", 0),
        at_least("members", 1, "1 = one model; more: an ensemble of that many, trained one after another"),
        at_least("member_min_minutes", 0, "a member's least budget in minutes; 0 = off"),
        Rule(
            "later_members",
            lambda v, g: set(vars(v)) <= {"model", "optim"},
            "only the model and optim groups can change for the later members (they share the data, its "
            "vocabulary and the budget), e.g. +train.later_members.model.d_model=256",
        ),
        Rule(
            "restart_from",
            lambda v, g: not v or g.members == 1,
            "is for one model: with train.members={g.members} every member would go on from that checkpoint "
            "with its random state, the same run N times",
        ),
    ],
    "decode": [
        one_of("strategy", ("beam", "greedy", "sample")),
        at_least("beam_size", 1),
        Rule("nbest", lambda v, g: 1 <= v <= max(g.beam_size, 1), "must be in [1, decode.beam_size={g.beam_size}]"),
        one_of("length_penalty", ("gnmt", "length", "none")),
        at_least("max_len_a", 0, "max output length = a * |src| + b"),
        at_least("max_len_b", 0, "max output length = a * |src| + b"),
        at_least("min_len", 0, "output pieces before EOS is allowed"),
        one_of("stopping", ("topk_eos", "exact", "fairseq")),
        positive("temperature", "sampling temperature"),
        at_least("top_k", 0, "0 = all tokens"),
        Rule("top_p", lambda v, g: 0 < v <= 1, "must be in (0, 1] (nucleus mass; 1 = all tokens)"),
        positive("max_tokens", "source tokens x beam per batch"),
        positive("max_sentences", "sentences per batch"),
        one_of("refill", ("greedy", "all", "none")),
        one_of("on_too_long", ("truncate", "reject")),
    ],
}


def group_problems(group_name: str, group: Any) -> list[str]:
    """One line per broken rule of one group's dataclass (``"decode"``, a ``DecodeConfig``)."""
    found = (rule.problem(group_name, group) for rule in RULES[group_name])
    return [p for p in found if p is not None]


def problems(cfg: Any) -> list[str]:
    """One line per broken rule of a whole ``Config``, in group order."""
    return [p for name in RULES for p in group_problems(name, getattr(cfg, name))]
