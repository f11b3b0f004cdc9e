"""Keep freed tensor memory in the process instead of handing it back to the kernel every step.

glibc's ``malloc`` serves blocks above its mmap threshold (dynamic, at most 32 MiB) with ``mmap``
and returns them with ``munmap`` on free. A training step frees and re-allocates the same large
activations every update (the (B, T, V) logits alone are ~110 MiB at 4096 tokens and an 8k
vocabulary), so every step page-faults them in again and the kernel zeroes every page: measured on
``transformer_mini`` (45 updates), 6.3 million minor faults and 17 s of system time out of 107 s of
CPU. With mmap off and trimming raised, freed blocks stay in the heap and are reused: 0.35 million
faults, 4 s of system time, 1.11-1.37x the target tokens/s (5 alternated rounds), for 16-27% more
peak RSS (the heap keeps its high-water mark and some fragmentation). Since the loss no longer makes
(B, T, V) blocks (``mt.train.loss.output_loss``) the gain is smaller: 1.14x and 0.99x on
``transformer_small`` bf16 in 2 alternated rounds, 1-2% more peak RSS.

Decoding has the same pattern (each step's (rows, V) logits and grown caches): the inference commands call
this too (beam 4 of a ``transformer_base``: 87-92k page faults and ~0.5 s of system time in ~11 s of CPU
without it, 2-3k and 0.05 s with it). ``train.keep_freed_memory=false`` restores glibc's defaults for
training. Elsewhere (macOS, musl) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

logger = logging.getLogger(__name__)

# <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_THRESHOLD_BYTES = 2**31 - 1  # mallopt takes a C int: ~2 GiB, the most it can say


def keep_freed_memory() -> bool:
    """Disable glibc's mmap for large blocks and its heap trimming; True if applied."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    applied = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    if not applied:
        logger.warning("mallopt refused the allocator settings; this process runs with glibc's defaults")
    return applied
