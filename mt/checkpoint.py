"""Checkpoints that survive crashes and cannot run code when loaded.

Writing is atomic: the state goes to a temporary file in the same directory, is flushed and
fsync'ed, then renamed over the target, so an interrupted write (a kill, a full disk) never replaces
a good checkpoint. Loading uses ``torch.load(weights_only=True)``: tensors and plain Python data
only, so a checkpoint from someone else cannot execute code. Configs are stored as plain dicts and
tokenizers as the SentencePiece model bytes.

Each checkpoint records the mt version that wrote it (``mt_version``). One from an older version
loads (its config is upgraded to today's fields); one from a newer version is refused by name, since
it may hold settings this version would silently misread.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mt import __version__
from mt.errors import UserError

CHECKPOINT_RE = re.compile(r"^checkpoint_(\d+)\.pt$")
# A training checkpoint's ``model`` is what inference uses. With ``train.ema_decay`` that is the moving
# average of the weights, and the optimizer's own weights (for resuming) are kept under this key.
RAW_MODEL_KEY = "raw_model"


class CheckpointError(UserError):
    """A checkpoint could not be written or read; the message names the file."""


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Atomically write ``state`` to ``path`` (temp file, fsync, rename), stamped with this mt version."""
    path = Path(path)
    state = {**state, "mt_version": __version__}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        why = "the disk is full" if e.errno == errno.ENOSPC else str(e)
        raise CheckpointError(f"could not write checkpoint {path}: {why}; the previous one is intact") from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def link_checkpoint(source: Path, target: Path) -> None:
    """Make ``target`` (e.g. best.pt, last.pt) point at ``source`` atomically, without copying."""
    tmp = target.with_name(f".{target.name}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:  # file systems without hard links
        import shutil

        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def load_checkpoint(
    path: str | Path, map_location: str | torch.device = "cpu", *, mmap: bool = False
) -> dict[str, Any]:
    """Read a checkpoint safely (weights only); a missing, truncated or foreign file raises CheckpointError.

    With ``mmap=True`` tensors are views of the file: only the bytes a caller touches are read, so
    an entry it ignores (the optimizer state) never comes into memory.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as e:  # noqa: BLE001 - torch raises many types for corrupt files
        raise CheckpointError(
            f"checkpoint {path} is corrupted or truncated ({type(e).__name__}: {str(e)[:200]})"
        ) from e
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise CheckpointError(f"{path} is not an mt checkpoint (no 'model' and 'config' entries)")
    check_version(path, state.get("mt_version"))
    return state


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.3.0"`` -> ``(0, 3, 0)``; a pre-release suffix is ignored (``"0.4.0rc1"`` -> ``(0, 4, 0)``)."""
    parts = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def check_version(path: Path, stored: Any) -> None:
    """Refuse a checkpoint written by a newer mt than this one (no ``mt_version``: before 0.3.0, accepted)."""
    if stored is None:
        return
    if not isinstance(stored, str) or not version_tuple(stored):
        raise CheckpointError(f"{path}: unreadable mt_version {stored!r}")
    if version_tuple(stored) > version_tuple(__version__):
        raise CheckpointError(
            f"{path} was written by mt {stored}, newer than this mt {__version__}: upgrade mt to read it"
        )


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """``checkpoint_<step>.pt`` files in ``directory``, oldest first."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := CHECKPOINT_RE.match(p.name))]
    return sorted(found)


def prune_checkpoints(directory: Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` numbered checkpoints (best.pt/last.pt are links)."""
    if keep_last <= 0:
        return
    for _, path in list_checkpoints(directory)[:-keep_last]:
        path.unlink(missing_ok=True)


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """The last checkpoint's state with its model weights replaced by the mean over ``paths``.

    Streaming: one checkpoint is open at a time (memory-mapped, so its optimizer state is never
    read) and added into a running float32 sum, so peak memory is about two copies of the weights
    whatever ``len(paths)``. The result drops the optimizer and scaler states (and the optimizer's weights
    beside a moving average, ``RAW_MODEL_KEY``: the average is what is averaged).
    """
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for i, path in enumerate(paths):
        state = load_checkpoint(path, mmap=True)
        weights = state["model"]
        if i == 0:
            total = {k: v.to(_sum_dtype(v), copy=True) for k, v in weights.items() if v.is_floating_point()}
        else:
            _check_same_weights(paths[0], total, path, weights)
            for key, value in total.items():
                value.add_(weights[key])
        if i == len(paths) - 1:  # copied out of the mapped file, which is then closed
            dtypes = {k: v.dtype for k, v in weights.items()}
            buffers = {k: v.clone() for k, v in weights.items() if not v.is_floating_point()}
            dropped = ("model", RAW_MODEL_KEY, "optimizer", "scaler")
            result = _copied({k: v for k, v in state.items() if k not in dropped})
        del state, weights  # unmaps the file before the next one is opened
    result["model"] = {
        k: total[k].div_(len(paths)).to(dtype) if k in total else buffers[k] for k, dtype in dtypes.items()
    }
    result["averaged_from"] = [str(p) for p in paths]
    return result


def _sum_dtype(value: torch.Tensor) -> torch.dtype:
    return torch.promote_types(value.dtype, torch.float32)  # fp16/bf16 are summed in float32


def _check_same_weights(first: Path, total: dict[str, torch.Tensor], path: Path, weights: dict) -> None:
    floats = {k for k, v in weights.items() if v.is_floating_point()}
    for key in sorted(floats ^ total.keys()):
        where = "only in" if key in floats else "missing from"
        raise CheckpointError(f"cannot average {path} with {first}: weight {key} is {where} {path.name}; "
                              "average checkpoints of one run")
    for key, value in total.items():
        if weights[key].shape != value.shape:
            raise CheckpointError(
                f"cannot average {path} with {first}: weight {key} is {tuple(weights[key].shape)} there, "
                f"{tuple(value.shape)} in the first; average checkpoints of one run"
            )


def _copied(value: Any) -> Any:
    """``value`` with every tensor cloned (out of a memory-mapped file)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_copied(v) for v in value)
    return value


PACKED_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.qint8}  # --precision


def load_for_inference(
    path: str | Path,
    device: str | torch.device = "cpu",
    *,
    pack: bool = False,
    precision: str = "fp32",
    native: bool = True,
):
    """Model (eval mode), tokenizers and typed config from a checkpoint, safely. ``pack``: the linears
    packed for a CPU model (``mt.model.packed_linear``; the state dict is unchanged), as float32 or, with
    ``precision="bf16"``, bfloat16 products (then ``bf16_supported()`` must hold), with ``"int8"`` int8
    weights (``int8_supported()``); and, with ``native``, the encoder's layers and the decoder's cached steps
    in C++ where the C++ code covers the model (``mt.model.native``: a float32 model whose linears stay
    unpacked, with ReLU, SiLU or GELU and none of qk-norm, grouped-query attention or SwiGLU)."""
    from mt.config import to_config
    from mt.model import build_model, pack_linears_

    state = load_checkpoint(path, map_location="cpu")
    cfg = to_config(state["config"])
    tokenizers = tokenizers_from_state(state)
    model = build_model(
        cfg.model, tokenizers.src.padded_vocab_size, tokenizers.tgt.padded_vocab_size
    )
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not match the stored model config: {e}") from e
    model.to(device).eval()
    if pack:
        pack_linears_(model, PACKED_DTYPES[precision])
        if native and torch.device(device).type == "cpu":
            model.encoder.use_native()  # a model it does not cover keeps the Python layers
            model.decoder.use_native()
    return model, tokenizers, cfg


def load_models_for_inference(
    paths: Sequence[str | Path],
    device: str | torch.device = "cpu",
    *,
    pack: bool = False,
    precision: str = "fp32",
    native: bool = True,
):
    """``load_for_inference`` of one checkpoint, or of several as one ``mt.model.Ensemble``: then every
    checkpoint must hold the same tokenizers (CheckpointError naming the first that differs); the tokenizers
    and config returned are the first checkpoint's (its ``decode`` settings, its length limits)."""
    from mt.model import Ensemble

    model, tokenizers, cfg = load_for_inference(paths[0], device, pack=pack, precision=precision, native=native)
    if len(paths) == 1:
        return model, tokenizers, cfg
    members = [model]
    for path in paths[1:]:
        member, other, other_cfg = load_for_inference(path, device, pack=pack, precision=precision,
                                                     native=native)
        if tokenizers_state(other) != tokenizers_state(tokenizers):
            raise CheckpointError(
                f"{path} has another vocabulary than {paths[0]}: an ensemble needs checkpoints trained with "
                "the same tokenizer"
            )
        cfg.model.max_positions = min(cfg.model.max_positions, other_cfg.model.max_positions)
        members.append(member)
    return Ensemble(members), tokenizers, cfg


def load_tokenizers_and_config(path: str | Path):
    """Tokenizers and typed config of a checkpoint, without building its model (the weights stay on disk)."""
    from mt.config import to_config

    state = load_checkpoint(path, map_location="cpu", mmap=True)
    return tokenizers_from_state(state), to_config(state["config"])


def tokenizers_state(tokenizers) -> dict[str, Any]:
    """Tokenizer models as bytes, so a checkpoint is self-contained; an imported model's vocabularies (model id
    -> piece, ``mt.data.vocab_tokenizer``) as lists of strings beside them."""
    state = {
        "joint": tokenizers.joint,
        "src": tokenizers.src.model_proto,
        "tgt": None if tokenizers.joint else tokenizers.tgt.model_proto,
    }
    for side in ("src", "tgt"):
        tokenizer = getattr(tokenizers, side)
        vocab = getattr(tokenizer, "vocab", None)
        if vocab is not None and not (side == "tgt" and tokenizers.joint):
            state[f"{side}_vocab"], state[f"{side}_rows"] = vocab, tokenizer.padded_vocab_size
    return state


def tokenizers_from_state(state: dict[str, Any]):
    from mt.data import Tokenizer, Tokenizers
    from mt.data.vocab_tokenizer import VocabTokenizer

    tok = state.get("tokenizers")
    if tok is None:
        raise CheckpointError("checkpoint holds no tokenizer")

    def side(name: str):
        vocab = tok.get(f"{name}_vocab")
        if vocab is None:
            return Tokenizer.from_proto(tok[name])
        return VocabTokenizer(tok[name], vocab, tok[f"{name}_rows"])

    src = side("src")
    tgt = src if tok["joint"] else side("tgt")
    return Tokenizers(src=src, tgt=tgt, joint=tok["joint"])
