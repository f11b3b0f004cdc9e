"""A binarized split as the model reads it: ids as memory-mapped Arrow views, lengths, lazy raw text.

Nothing here copies the corpus: an Arrow column of a split saved by ``datasets`` comes in many record
batches (chunks), and each chunk's values and offsets are viewed in place as numpy arrays; only the
lengths (two ``(N,)`` int64 arrays) are computed.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import overload

import datasets
import numpy as np
import pyarrow as pa
import torch


class TextColumn(Sequence[str]):
    """A lazy, read-only view of an Arrow string column (no Python strings until indexed)."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self._column = column

    def __len__(self) -> int:
        return len(self._column)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return self._column[i].to_pylist()
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self._column[i].as_py()

    def take(self, indices: Sequence[int]) -> list[str]:
        """The strings of rows ``indices``, in that order (one Arrow gather, not one lookup per row)."""
        return self._column.take(pa.array(indices, type=pa.int64())).to_pylist()


class RaggedIds:
    """An Arrow ``list<int32>`` column as per-chunk zero-copy views: row ``i``'s ids without copying the column."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        chunks = [chunk for chunk in column.chunks if len(chunk)]
        # a chunk's offsets index its (unsliced) values buffer, so a sliced chunk reads right too
        self._values = [chunk.values.to_numpy() for chunk in chunks]  # int32 views, no copy
        self._offsets = [chunk.offsets.to_numpy() for chunk in chunks]  # (n_c + 1,) int32 views
        self._starts = [0, *np.cumsum([len(chunk) for chunk in chunks]).tolist()]  # first row of each chunk
        lens = [np.diff(offsets).astype(np.int64) for offsets in self._offsets]
        self.lens = np.concatenate(lens) if lens else np.zeros(0, dtype=np.int64)  # (N,)

    def __len__(self) -> int:
        return self._starts[-1]

    def row(self, i: int) -> np.ndarray:
        """Ids of row ``i`` as an int32 view (no copy)."""
        if not 0 <= i < len(self):
            raise IndexError(i)
        c = bisect.bisect_right(self._starts, i) - 1
        offsets, j = self._offsets[c], i - self._starts[c]
        return self._values[c][offsets[j] : offsets[j + 1]]


class TokenizedSplit:
    """One binarized split: ids as memory-mapped Arrow views, lengths, raw text, and each example's pair.

    ``pairs`` (N,) is each example's index into ``data_pairs`` (all 0 for a split of one pair).
    """

    def __init__(self, name: str, dataset: datasets.Dataset | pa.Table) -> None:
        self.name = name
        if isinstance(dataset, pa.Table):
            table = dataset
        else:
            table = dataset.flatten_indices().data.table if dataset._indices is not None else dataset.data.table
        self._table = table
        self._src = RaggedIds(table.column("src_ids"))
        self._tgt = RaggedIds(table.column("tgt_ids"))
        self.src_lens = torch.from_numpy(self._src.lens)  # (N,) pieces, no EOS
        self.tgt_lens = torch.from_numpy(self._tgt.lens)  # (N,) pieces, no BOS/EOS
        self.src_text = TextColumn(table.column("src"))
        self.tgt_text = TextColumn(table.column("tgt"))
        has_pairs = "pair" in table.column_names
        self.pairs = table.column("pair").to_numpy().astype(np.int64) if has_pairs else np.zeros(len(self), np.int64)

    def pair_split(self, pair: int) -> TokenizedSplit:
        """The examples of pair ``pair`` alone, in order (a copy of their rows: meant for valid / test)."""
        rows = np.flatnonzero(self.pairs == pair)
        return TokenizedSplit(self.name, self._table.take(pa.array(rows, type=pa.int64())))

    def __len__(self) -> int:
        return len(self.src_lens)

    def src_array(self, i: int) -> np.ndarray:
        """Source piece ids of example ``i`` as an int32 view (no copy)."""
        return self._src.row(i)

    def tgt_array(self, i: int) -> np.ndarray:
        """Target piece ids of example ``i`` as an int32 view (no copy)."""
        return self._tgt.row(i)

    def src_ids(self, i: int) -> list[int]:
        return self.src_array(i).tolist()

    def tgt_ids(self, i: int) -> list[int]:
        return self.tgt_array(i).tolist()

    def __repr__(self) -> str:
        return f"TokenizedSplit({self.name!r}, pairs={len(self)})"
