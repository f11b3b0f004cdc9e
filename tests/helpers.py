"""Shared builders for the training tests: a composed config with tiny, fast overrides."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from mt.config import CONF_DIR, Config, compose

__all__ = ["CONF_DIR", "TINY", "compose_config", "tiny_config"]

TINY = [
    "model=transformer_tiny",
    "model.d_model=32",
    "model.d_ff=64",
    "model.heads=4",
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "data.demo.train_size=400",
    "data.demo.valid_size=40",
    "data.demo.test_size=40",
    "data.demo.max_number=9999",
    "data.vocab_size=120",
    "data.max_tokens=512",
    "data.num_workers=1",
    "optim.warmup_updates=10",
    "train.log_every=1",
    "train.progress=false",
    "train.tensorboard=false",
    "train.test_at_end=false",
    "train.valid_bleu=false",
]


def compose_config(overrides: list[str]) -> Config:
    return compose(overrides)


def tiny_config(tmp: Path, *extra: str) -> Config:
    """A demo run small enough to train for a few updates in seconds."""
    return compose_config(
        TINY + [f"train.run_dir={tmp / 'run'}", f"data.cache_dir={tmp / 'cache'}", *extra]
    )


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module, registered in ``sys.modules`` (dataclasses look it up there)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def script_with_siblings(name: str, siblings: tuple[str, ...]) -> Iterator[ModuleType]:
    """``load_script(name)`` for a script that imports the sibling scripts ``siblings``: scripts/ is on
    ``sys.path`` meanwhile, and the script and its siblings leave ``sys.modules`` after."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield load_script(name)
    finally:
        sys.path.remove(str(SCRIPTS))
        for module in (name, *siblings):
            sys.modules.pop(module, None)


def decode_beam_store(model, src) -> list:
    """Beam search's decoding state through one fixed path: 3 sentences (``src`` (3, S), no padding) x 3 beams
    fanned out, beams swapping and repeating within a sentence, the third sentence leaving, beams within
    again; random tokens fed. Every decode call's logits."""
    import torch

    reorders = [torch.arange(3).repeat_interleave(3), torch.tensor([2, 0, 0, 5, 3, 4, 6, 6, 6]),
                torch.tensor([1, 1, 2, 3, 5, 5]), torch.tensor([2, 0, 1, 5, 5, 4])]  # fan out, within, drop, within
    enc = model.encode(src, torch.zeros_like(src, dtype=torch.bool))
    cache = model.new_cache(beams_per_sentence=3)
    tokens, logits = torch.full((3, 1), 2), []
    for step, keep in enumerate(reorders):
        logits.append(model.decode(tokens, enc, cache))
        cache.reorder(keep)
        if step == 2:
            enc.reorder(torch.tensor([0, 1]))  # the third sentence left
        tokens = torch.randint(4, 64, (keep.numel(), 1), generator=torch.Generator().manual_seed(step))
    logits.append(model.decode(tokens, enc, cache))
    return logits
