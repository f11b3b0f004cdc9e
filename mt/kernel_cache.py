"""Bound oneDNN's caches of compiled kernels, so a process does not grow with every new matmul shape.

On CPU, torch runs bf16 matmuls (training's autocast) and the packed linears of inference
(``mt.model.packed_linear``) through oneDNN (via ideep), which builds a JIT-compiled kernel for each exact
shape and caches it twice: oneDNN's primitive cache and ideep's own LRU cache, 1024 entries each.
Token-based training batches give almost every update new shapes, so every update adds kernels for each
linear's forward and both backward products. Measured on ``transformer_small`` bf16 (Multi30k,
4096-token batches, ``train.keep_freed_memory`` on or off alike): RSS rose at each new batch shape, from
1.3 GiB after the first update to 2.31-2.42 GiB at update 60 and still rising, while fp32 (MKL, no such
cache) stayed at 1.88 GiB. At update 60, 2 alternated rounds, tokens/s and RSS:

    both caches at 1024 (the libraries' default)  2,400 / 2,419 tok/s   2,374 / 2,314 MiB
    oneDNN's at 16, ideep's at 1024               2,373 / 2,333         1,841 / 1,869
    both at 32 (``train.kernel_cache_capacity``)  2,385 / 2,376         1,649 / 1,646
    both at 16                                    2,222 / 2,408         1,548 / 1,573
    oneDNN's at 0 (rebuilt every call)            2,019 / 2,057         1,713 / 1,715

A bf16 linear over 60 new row counts grows RSS by ~120 MiB at 1024 and ~39 MiB at 32
(``tests/test_kernel_cache.py``). Inference bounds them too (``packed_linear.packing_supported``).

oneDNN and ideep read ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` and ``LRU_CACHE_CAPACITY`` once, when
they first cache a kernel, so this must run before the process's first oneDNN matmul
(``build_components`` calls it first thing; inference before its first packed product).
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

CAPACITY_ENVS = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")  # oneDNN's, ideep's


def bound_kernel_caches(capacity: int, *, environment_wins: bool = False) -> None:
    """Make oneDNN and ideep keep at most ``capacity`` kernels each; -1 leaves their own settings.

    ``environment_wins``: a capacity already set in the environment stays (inference's default); else
    ``capacity`` replaces it and says so (training's ``train.kernel_cache_capacity``).
    0 is refused: torch 2.13 crashes (SIGSEGV) at the first bf16 matmul with ``LRU_CACHE_CAPACITY=0``.
    """
    if capacity == -1:
        return
    if capacity < 1:
        raise ValueError(f"a kernel cache capacity must be >= 1, or -1 for the libraries' own, got {capacity}")
    for name in CAPACITY_ENVS:
        before = os.environ.get(name)
        if before is not None and environment_wins:
            continue
        if before is not None and before != str(capacity):
            logger.info("train.kernel_cache_capacity=%d replaces %s=%s from the environment", capacity, name, before)
        os.environ[name] = str(capacity)
