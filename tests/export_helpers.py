"""What the export tests share: one small trained demo model per session, untrained variants, mt's reference.

``demo_model`` trains the number-words demo once per test session (memoised here, and shared by the test
processes of one session through a folder and a file lock, so every module of either process reads one model):
d_model 64, 2+2 layers, 800 updates, ~30 s on one thread, greedy test BLEU ~77; it emits EOS and translates
most lines exactly. Its vocabulary (124 pieces) is padded to 128 rows, so the embedding's padding ids are part
of what the exports must ban. ``demo_model(base, *overrides)`` trains a variant once as well (the CTranslate2
tests train one with every modern option it exports: ~25 s).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from helpers import tiny_config

from mt.checkpoint import load_for_inference, save_checkpoint, tokenizers_state
from mt.config import Config, to_dict
from mt.data import Tokenizers, train_tokenizer
from mt.data.demo import demo_line, demo_numbers
from mt.data.languages import tag_pieces
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from mt.decode import Hypothesis, Translator
from mt.decode.length_penalty import length_penalty
from mt.decode.translator import collate_sources
from mt.model import build_model

DEMO = [
    "model.d_model=64",
    "model.d_ff=128",
    "model.encoder_layers=2",
    "model.decoder_layers=2",
    "data.vocab_size=124",
    "data.demo.train_size=2000",
    "data.demo.test_size=300",
    "train.max_updates=800",
    "train.save_every=800",
    "train.validate_every=100000",
    "train.threads=1",
    "optim.warmup_updates=100",
    "optim.lr_scale=2.0",
    "decode.length_penalty=length",
]


@dataclass(frozen=True)
class DemoModel:
    ckpt: Path
    sources: list[str]  # the 300 test lines
    references: list[str]


_TRAINED: dict[tuple[Path, tuple[str, ...]], DemoModel] = {}


def demo_model(base: Path, *overrides: str) -> DemoModel:
    """Train the demo model (with ``overrides`` of its config) once per session (see the module docstring):
    under ``base``'s name in a folder every test process of the session shares (``shared_base``), the first
    process that needs it training it while a second one waits, reads don't write."""
    key = (base, overrides)
    if key not in _TRAINED:
        from filelock import FileLock

        from mt.train.loop import train

        shared = shared_base(base)
        shared.parent.mkdir(parents=True, exist_ok=True)
        cfg = tiny_config(shared, *DEMO, *overrides)
        ckpt = Path(cfg.train.run_dir) / "checkpoints" / "last.pt"
        with FileLock(f"{shared}.lock"):
            if not (shared / "trained").exists():
                train(cfg)
                (shared / "trained").write_text(" ".join(overrides), encoding="utf-8")
        pairs = [demo_line(numbers) for numbers in demo_numbers(cfg.data.demo)["test"]]
        _TRAINED[key] = DemoModel(ckpt, [p[0] for p in pairs], [p[1] for p in pairs])
    return _TRAINED[key]


def shared_base(base: Path) -> Path:
    """``base`` (a folder in one test process's base temp) moved to ``shared/`` beside the processes' own
    folders: pytest-xdist gives each process ``<session temp>/popen-gwN``, one process alone ``<session temp>``."""
    own = base.parent
    session = own.parent if own.name.startswith("popen-gw") else own
    return session / "shared" / base.name


def untrained_checkpoint(path: Path, *overrides: str) -> Path:
    """A randomly initialised model (seed 0) with demo tokenizers, saved as an mt checkpoint at ``path``.

    ``data.joint_vocab=false`` trains separate English (100) and German (90 -> 96 rows) tokenizers.
    """
    cfg = tiny_config(path.parent, "data.vocab_size=100", *overrides)
    english, german = zip(*(demo_line(n) for n in demo_numbers(cfg.data.demo)["train"]), strict=True)
    if cfg.data.joint_vocab:
        joint = train_tokenizer(iter(english + german), 100)
        tokenizers = Tokenizers(joint, joint, joint=True)
    else:
        tokenizers = Tokenizers(train_tokenizer(iter(english), 100), train_tokenizer(iter(german), 90), joint=False)
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizers.src.padded_vocab_size, tokenizers.tgt.padded_vocab_size)
    state = {"model": model.state_dict(), "config": to_dict(cfg), "tokenizers": tokenizers_state(tokenizers)}
    save_checkpoint(path, state)
    return path


MULTI_TARGETS = ["de", "fr"]


def multilingual_checkpoint(path: Path, *overrides: str) -> Path:
    """A randomly initialised model (seed 0) of two target languages, en-de and en-fr, saved at ``path``.

    Its joint tokenizer (100 pieces) holds the tags ``>>de<<`` and ``>>fr<<`` as pieces of their own. The
    demo corpus has no French: the German side stands in for it, which a tokenizer and random weights do
    not notice. At the default initial scale a random model says the same thing whatever its source (the
    two tags gave the same greedy output on 12 of 12 demo lines); with every weight matrix doubled its
    outputs follow its input, so the tag alone makes the two targets' outputs differ.
    """
    cfg = tiny_config(path.parent, "data.vocab_size=100", "data.pairs=[en-de,en-fr]", *overrides)
    english, german = zip(*(demo_line(n) for n in demo_numbers(cfg.data.demo)["train"]), strict=True)
    joint = train_tokenizer(iter(english + german), 100, user_symbols=tag_pieces(cfg.data))
    tokenizers = Tokenizers(joint, joint, joint=True)
    torch.manual_seed(0)
    model = build_model(cfg.model, tokenizers.src.padded_vocab_size, tokenizers.tgt.padded_vocab_size)
    with torch.no_grad():
        for weight in model.parameters():
            if weight.dim() > 1:
                weight.mul_(2.0)
    state = {"model": model.state_dict(), "config": to_dict(cfg), "tokenizers": tokenizers_state(tokenizers)}
    save_checkpoint(path, state)
    return path


def demo_sources(n: int = 40) -> list[str]:
    """``n`` English test lines of the default demo corpus (for the untrained models)."""
    cfg = tiny_config(Path("/nonexistent"))
    return [demo_line(numbers)[0] for numbers in demo_numbers(cfg.data.demo)["test"][:n]]


def mt_search(
    ckpt: Path, lines: list[str], target_lang: str | None = None, **decode
) -> tuple[list[Hypothesis], Config]:
    """mt's best hypothesis per line (into ``target_lang``, for a model of several) with the checkpoint's
    decode settings and ``decode`` overrides."""
    model, tokenizers, cfg = load_for_inference(ckpt)
    settings = dataclasses.replace(cfg.decode, **decode)
    translator = Translator(model, tokenizers, settings, max_positions=cfg.model.max_positions)
    return [t.hypotheses[0] for t in translator.translate_nbest(lines, target_lang=target_lang)], cfg


def mt_score(ckpt: Path, line: str, tokens: list[int], penalty: str, alpha: float) -> float:
    """mt's score of ``tokens`` (pieces, no EOS) for ``line``: teacher-forced log-prob incl. EOS / lp(|Y|)."""
    model, tokenizers, _ = load_for_inference(ckpt)
    src, src_pad_mask = collate_sources([tokenizers.src.encode(line)], "cpu")
    tgt = torch.tensor([[BOS_ID, *tokens]])
    with torch.inference_mode():
        lprobs = F.log_softmax(model(src, src_pad_mask, tgt).float(), dim=-1)[0]  # (T, V)
    logprob = float(lprobs.gather(1, torch.tensor([*tokens, EOS_ID])[:, None]).sum())
    return logprob / length_penalty(len(tokens) + 1, penalty, alpha)


def differences_beyond_ties(
    ckpt: Path, lines: list[str], ours: list[list[int]], theirs: list[list[int]], penalty: str, alpha: float
) -> list[tuple[int, float]]:
    """(line, score gap) of every output that differs from mt's by more than a 1e-5 tie in mt's score."""
    out = []
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            gap = mt_score(ckpt, lines[i], a, penalty, alpha) - mt_score(ckpt, lines[i], b, penalty, alpha)
            if not math.isclose(gap, 0.0, abs_tol=1e-5):
                out.append((i, gap))
    return out


def compare_forward(ckpt: Path, directory: Path, lines: list[str]) -> torch.Tensor:
    """An exported MarianMTModel against mt on a padded batch (right-padded sources and targets): encoder outputs
    and decoder logits within 1e-4, ``-inf`` ones (an imported model's logits bias) at the same ids. Returns mt's
    logits at the real target positions (N, V)."""
    import transformers

    model, tokenizers, _ = load_for_inference(ckpt)
    marian = transformers.MarianMTModel.from_pretrained(directory).eval()
    src, src_pad_mask = collate_sources([tokenizers.src.encode(line) for line in lines], "cpu")  # (B, S)
    targets = [tokenizers.tgt.encode(line)[: 2 + 2 * i] for i, line in enumerate(lines)]
    tgt_in = torch.full((len(lines), max(map(len, targets)) + 1), PAD_ID)  # (B, T)
    for row, ids in enumerate(targets):
        tgt_in[row, : len(ids) + 1] = torch.tensor([BOS_ID, *ids])
    assert bool(src_pad_mask.any()) and bool((tgt_in == PAD_ID).any())  # both sides really padded
    with torch.inference_mode():
        ours_enc = model.encode(src, src_pad_mask).out  # (B, S, D)
        theirs_enc = marian.get_encoder()(input_ids=src, attention_mask=(~src_pad_mask).long()).last_hidden_state
        ours = model(src, src_pad_mask, tgt_in)  # (B, T, V)
        theirs = marian(input_ids=src, attention_mask=(~src_pad_mask).long(), decoder_input_ids=tgt_in).logits
    assert torch.allclose(ours_enc[~src_pad_mask], theirs_enc[~src_pad_mask], atol=1e-4)
    real = tgt_in != PAD_ID  # logits after a target pad are never used by mt
    assert ours.shape == theirs.shape and torch.equal(ours[real].isinf(), theirs[real].isinf())
    assert torch.allclose(ours[real], theirs[real], atol=1e-4)
    return ours[real]
