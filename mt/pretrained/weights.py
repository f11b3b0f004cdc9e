"""Bart-family weights (Marian, M2M-100, NLLB share the layer names) under mt's names, embedding rows in mt's order."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from mt.pretrained.files import PretrainedError

# mt's module under a layer -> the Bart-family module(s) whose weights it holds (several: concatenated rows)
ENCODER_LAYER = {
    "self_attn.qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "self_attn.out": ("self_attn.out_proj",),
    "self_attn_res.norm": ("self_attn_layer_norm",),
    "ffn.fc1": ("fc1",),
    "ffn.fc2": ("fc2",),
    "ffn_res.norm": ("final_layer_norm",),
}
DECODER_LAYER = ENCODER_LAYER | {
    "cross_attn.q": ("encoder_attn.q_proj",),
    "cross_attn.kv": ("encoder_attn.k_proj", "encoder_attn.v_proj"),
    "cross_attn.out": ("encoder_attn.out_proj",),
    "cross_attn_res.norm": ("encoder_attn_layer_norm",),
}


class Weights:
    """The source checkpoint's tensors; ``take`` marks each one used, ``unused`` lists the rest."""

    def __init__(self, tensors: dict[str, Tensor], origin: str) -> None:
        self.tensors, self.origin, self.used = tensors, origin, set()

    def has(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str) -> Tensor:
        if name not in self.tensors:
            raise PretrainedError(f"{self.origin}: the weights have no {name}")
        self.used.add(name)
        return self.tensors[name]

    def unused(self) -> list[str]:
        return sorted(set(self.tensors) - self.used)

    def refuse_unused(self) -> None:
        """PretrainedError naming the tensors that no ``take`` used: mt has no place for them."""
        if unused := self.unused():
            raise PretrainedError(f"{self.origin}: weights mt has no place for: {', '.join(unused[:5])}"
                                  + (f" and {len(unused) - 5} more" if len(unused) > 5 else ""))


def layer_weights(weights: Weights, source: str, target: str, parts: dict[str, tuple[str, ...]]) -> dict[str, Tensor]:
    """One layer's weights: mt's ``target.<module>.weight|bias`` from the source's ``source.<module>...``."""
    out = {}
    for mt_name, names in parts.items():
        for kind in ("weight", "bias"):
            out[f"{target}.{mt_name}.{kind}"] = torch.cat([weights.take(f"{source}.{n}.{kind}") for n in names])
    return out


def stack_weights(weights: Weights, source: str, target: str, layers: int, decoder: bool) -> dict[str, Tensor]:
    """Every layer of an encoder or decoder stack (``source.layers.i`` -> ``target.layers.i``)."""
    parts = DECODER_LAYER if decoder else ENCODER_LAYER
    out = {}
    for i in range(layers):
        out |= layer_weights(weights, f"{source}.layers.{i}", f"{target}.layers.{i}", parts)
    return out


def in_mt_order(rows: Tensor, order: Sequence[int]) -> Tensor:
    """Rows (V', ...) of a vocabulary-indexed tensor picked for mt's ids: ``out[i] = rows[order[i]]``."""
    if max(order) >= rows.size(0):
        raise PretrainedError(f"a vocabulary id ({max(order)}) is past the embedding's {rows.size(0)} rows")
    return rows[torch.tensor(order)].clone()
