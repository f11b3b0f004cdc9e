"""A Hugging Face model directory, read without running its code: ``config.json``, the weights, the tokenizer files.

Weights come from ``model.safetensors`` (or its shards, ``model.safetensors.index.json``) through safetensors,
or from ``pytorch_model.bin`` through ``torch.load(weights_only=True)``: tensors only, so a downloaded
directory cannot execute anything. No network: the directory must already be on disk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mt.errors import UserError


class PretrainedError(UserError):
    """A model directory mt cannot import; the message names the file, the field or the value."""


@dataclass(frozen=True)
class HFDirectory:
    """What a ``save_pretrained`` directory holds, read on demand."""

    path: Path
    config: dict[str, Any]

    @classmethod
    def open(cls, path: str | Path) -> HFDirectory:
        """The directory at ``path`` with its parsed ``config.json``; ``PretrainedError`` when either is missing."""
        path = Path(path)
        if not path.is_dir():
            raise PretrainedError(f"{path} is not a directory (give the folder a model was downloaded or saved to)")
        return cls(path, read_json(path / "config.json", required=True))

    def file(self, name: str) -> Path:
        """``path / name``, which must exist."""
        found = self.path / name
        if not found.is_file():
            raise PretrainedError(f"{self.path} has no {name}")
        return found

    def json(self, name: str) -> dict[str, Any]:
        """A JSON file of the directory as a dict; {} when the directory has none."""
        return read_json(self.path / name, required=False)

    def weights(self) -> dict[str, torch.Tensor]:
        """Every tensor of the checkpoint by its ``state_dict`` name, as float32 on the CPU."""
        safetensors = self.path / "model.safetensors"
        index = self.path / "model.safetensors.index.json"
        pickled = self.path / "pytorch_model.bin"
        if safetensors.is_file():
            tensors = read_safetensors(safetensors)
        elif index.is_file():
            shards = sorted(set(read_json(index, required=True).get("weight_map", {}).values()))
            tensors = {k: v for shard in shards for k, v in read_safetensors(self.file(shard)).items()}
        elif pickled.is_file():
            tensors = read_pickled_tensors(pickled)
        else:
            others = sorted(p.name for p in self.path.iterdir() if p.suffix in (".h5", ".msgpack", ".ckpt"))
            hint = f" (it has {', '.join(others)}: TensorFlow or Flax weights, not read)" if others else ""
            raise PretrainedError(f"{self.path} has no model.safetensors or pytorch_model.bin{hint}")
        return {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}


def read_json(path: Path, *, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise PretrainedError(f"{path.parent} has no {path.name}: not a Hugging Face model directory")
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PretrainedError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise PretrainedError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError) as e:
        raise PretrainedError(f"{path}: not a readable safetensors file ({e})") from None


def read_pickled_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - weights_only refuses code with several exception types
        raise PretrainedError(f"{path}: not a weights-only PyTorch file ({str(e).splitlines()[0]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise PretrainedError(f"{path}: expected a state dict of tensors")
    return state
