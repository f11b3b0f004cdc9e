"""TokenizedSplit's zero-copy views over an Arrow list column of many chunks (as datasets saves a split)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from mt.data.split import RaggedIds

ROWS = [[5, 6, 7], [], [8], [9, 10], [11, 12, 13, 14], [15], [16, 17]]


def _column() -> pa.ChunkedArray:
    """ROWS in four chunks: one of them a slice (offsets not starting at 0), one empty."""
    typ = pa.list_(pa.int32())
    whole = pa.array([[99, 98], *ROWS[3:6], [97]], type=typ)  # sliced to ROWS[3:6] below
    return pa.chunked_array(
        [pa.array(ROWS[:3], type=typ), pa.array([], type=typ), whole.slice(1, 3), pa.array(ROWS[6:], type=typ)]
    )


def test_rows_and_lengths_across_chunks_and_slices() -> None:
    ids = RaggedIds(_column())
    assert len(ids) == len(ROWS)
    assert ids.lens.tolist() == [len(r) for r in ROWS] and ids.lens.dtype == np.int64
    assert [ids.row(i).tolist() for i in range(len(ROWS))] == ROWS
    assert all(ids.row(i).dtype == np.int32 for i in range(len(ROWS)))
    with pytest.raises(IndexError):
        ids.row(len(ROWS))


def test_rows_are_views_of_the_arrow_buffers_not_copies() -> None:
    column = _column()
    ids = RaggedIds(column)
    chunk = column.chunk(2)  # the sliced one: rows 3..5
    buffer = np.frombuffer(chunk.values.buffers()[1], dtype=np.int32)
    assert np.shares_memory(ids.row(4), buffer)


def test_empty_column() -> None:
    ids = RaggedIds(pa.chunked_array([], type=pa.list_(pa.int32())))
    assert len(ids) == 0 and ids.lens.shape == (0,)


def test_split_saved_by_datasets_in_many_record_batches(tmp_path) -> None:
    import datasets

    from mt.data.split import TokenizedSplit

    rows = {"src": [f"s{i}" for i in range(25)], "tgt": [f"t{i}" for i in range(25)],
            "src_ids": [list(range(i % 4)) for i in range(25)], "tgt_ids": [[i] * (i % 3 + 1) for i in range(25)]}
    features = datasets.Features({"src": datasets.Value("string"), "tgt": datasets.Value("string"),
                                  "src_ids": datasets.Sequence(datasets.Value("int32")),
                                  "tgt_ids": datasets.Sequence(datasets.Value("int32"))})
    datasets.Dataset.from_dict(rows, features=features).select(range(3, 25)).save_to_disk(
        str(tmp_path / "d"), max_shard_size=200)  # several shards -> several chunks
    loaded = datasets.load_from_disk(str(tmp_path / "d"))
    assert loaded.data.table.column("src_ids").num_chunks > 1
    split = TokenizedSplit("train", loaded)
    assert [split.src_ids(i) for i in range(len(split))] == rows["src_ids"][3:]
    assert [split.tgt_ids(i) for i in range(len(split))] == rows["tgt_ids"][3:]
    assert split.src_lens.tolist() == [len(r) for r in rows["src_ids"][3:]]
    assert split.src_text[0] == "s3" and split.tgt_text[-1] == "t24"
