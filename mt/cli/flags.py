"""Flags shared by ``mt-translate`` and ``mt-eval``: the model, the device, decoding settings, ``--debug``.

Numbers are range-checked while parsing, so ``--beam 0`` is a usage error naming the flag (exit 2)
rather than a failure deep inside the search.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

from mt.cli.errors import UsageError
from mt.config import DecodeConfig

# flag -> DecodeConfig field; None values (flag not given) keep the checkpoint's setting
DECODE_FLAGS = {
    "strategy": "strategy",
    "beam": "beam_size",
    "nbest": "nbest",
    "lenpen": "length_penalty",
    "alpha": "alpha",
    "max_len_a": "max_len_a",
    "max_len_b": "max_len_b",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "seed": "seed",
    "max_tokens": "max_tokens",
    "refill": "refill",
    "max_sentences": "max_sentences",
    "on_too_long": "on_too_long",
    "min_len": "min_len",
    "stopping": "stopping",
}


def ranged(
    kind: type[int] | type[float], low: float, high: float | None = None, low_open: bool = False
) -> Callable[[str], int | float]:
    """An argparse ``type``: ``kind(text)`` within ``[low, high]`` (``(low, high]`` when ``low_open``)."""
    interval = f"{'(' if low_open else '['}{low}, {high if high is not None else 'inf'}]"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {expected}, got '{text}'") from None
        too_low = value <= low if low_open else value < low
        if too_low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be in {interval}, got {text}")
        return value

    return parse


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="show tracebacks of expected errors too (or MT_DEBUG=1)")


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """``--version``: print ``<prog> <mt version>`` and exit 0."""
    from mt import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


class AppendModel(argparse.Action):
    """A model flag that may be repeated (mt-serve's ``--ckpt A [B ...]``, ``--ct2 DIR``): each time another
    model, in the order given, as ``(flag's dest, values)`` in ``args.model_flags``; ``args.<dest>`` is the first."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = list(getattr(namespace, "model_flags", None) or [])
        given.append((self.dest, values))
        namespace.model_flags = given
        if getattr(namespace, self.dest, None) is None:
            setattr(namespace, self.dest, values)


def add_model_args(parser: argparse.ArgumentParser, *, ensemble: bool = False, repeated: bool = False) -> None:
    """``--ckpt``/``--exp``, ``--device``, ``--threads``, ``--debug``; ``ensemble``: ``--ckpt`` takes several;
    ``repeated``: ``--ckpt`` may be given again, each time another model (``AppendModel``)."""
    if repeated:
        parser.add_argument("--ckpt", type=Path, nargs="+", metavar="CKPT", action=AppendModel,
                            help="a model to serve: a checkpoint, or several with one vocabulary: one ensemble "
                                 "(their mean probabilities); repeat the flag for more models, e.g. --ckpt en-de.pt "
                                 "--ckpt de-en.pt (default: runs/<exp>/checkpoints/best.pt)")
    elif ensemble:
        parser.add_argument("--ckpt", type=Path, nargs="+", metavar="CKPT",
                            help="checkpoint (default: runs/<exp>/checkpoints/best.pt, or the members of "
                                 "runs/<exp>/ensemble.json after train.members=N); several checkpoints with the "
                                 "same vocabulary decode as one ensemble (their mean probabilities)")
    else:
        parser.add_argument("--ckpt", type=Path, help="checkpoint (default: runs/<exp>/checkpoints/best.pt)")
    parser.add_argument("--exp", default="demo", help="experiment name for the default checkpoint")
    parser.add_argument("--device", default="auto", help="cpu | cuda | cuda:N | auto (cuda if available)")
    parser.add_argument("--threads", type=ranged(int, 0), default=0, help="CPU threads for torch (0 = default)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32",
                        help="products of the linear layers on a CPU: fp32, bf16 (a CPU with bf16 instructions) or "
                             "int8 (int8 weights, inputs quantised per call); norms, softmax and scores stay fp32")
    parser.add_argument("--native", choices=("on", "off"), default="on",
                        help="greedy decoding steps of a small float32 model in C++ (built once per CPU on first "
                             "use; a model or machine it does not cover decodes in Python): on (default) or off")
    add_debug_flag(parser)


def add_workers_flag(parser: argparse.ArgumentParser) -> None:
    """``--workers N``: decoding processes on the CPU, each holding the model."""
    parser.add_argument("--workers", type=ranged(int, 1), default=1,
                        help="decoding processes, each with its own copy of the model on --threads threads "
                             "(default 1; one per core helps a small model that decodes in Python on a CPU; "
                             "with the C++ search one process is faster)")


def add_decode_args(parser: argparse.ArgumentParser) -> None:
    """Search settings; each overrides the checkpoint's ``decode`` config when given."""
    g = parser.add_argument_group("decoding (default: the checkpoint's decode settings)")
    g.add_argument("--strategy", choices=("beam", "greedy", "sample"))
    g.add_argument("--beam", type=ranged(int, 1), help="beam size")
    g.add_argument("--nbest", type=ranged(int, 1), help="hypotheses per input (beam search)")
    g.add_argument("--lenpen", choices=("gnmt", "length", "none"), help="length penalty")
    g.add_argument("--alpha", type=ranged(float, 0), help="length penalty exponent")
    g.add_argument("--max-len-a", type=ranged(float, 0), help="max output length = a * |src| + b")
    g.add_argument("--max-len-b", type=ranged(int, 0))
    g.add_argument("--temperature", type=ranged(float, 0, low_open=True), help="sampling temperature")
    g.add_argument("--top-k", type=ranged(int, 0), help="sample from the k most likely tokens (0 = all)")
    g.add_argument("--top-p", type=ranged(float, 0, 1, low_open=True), help="nucleus sampling mass (1 = all)")
    g.add_argument("--seed", type=int, help="sampling seed")
    g.add_argument("--max-tokens", type=ranged(int, 1), help="batch budget: source tokens x beam")
    g.add_argument("--max-sentences", type=ranged(int, 1), help="sentences per batch at most")
    g.add_argument("--refill", choices=("greedy", "all", "none"),
                   help="continuous batching (new sentences take finished ones' places) for: greedy search, "
                        "all (beam search too), none")
    g.add_argument("--on-too-long", choices=("truncate", "reject"), help="sources longer than the model allows")
    g.add_argument("--min-len", type=ranged(int, 0), help="pieces before EOS is allowed (1: no empty output)")
    g.add_argument("--stopping", choices=("topk_eos", "exact", "fairseq"),
                   help="beam stopping rule: topk_eos (best candidate is EOS), exact (no live beam can win "
                        "under the length penalty), fairseq (beam_size finished)")


def decode_config(base: DecodeConfig, args: argparse.Namespace) -> DecodeConfig:
    """``base`` with every decoding flag that was given applied; flags that contradict each other fail."""
    given = {field: getattr(args, flag) for flag, field in DECODE_FLAGS.items() if getattr(args, flag) is not None}
    cfg = dataclasses.replace(base, **given)
    if cfg.strategy == "beam" and cfg.nbest > cfg.beam_size:
        raise UsageError(f"--nbest {cfg.nbest} is more than the beam size {cfg.beam_size}; raise --beam")
    return cfg
