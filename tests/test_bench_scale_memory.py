"""scripts/bench_scale.py's peak split: private allocations count as anon, mapped file pages as file."""

import mmap

import numpy as np
import pytest
from helpers import load_script

MIB = 1024  # the peaks are in KiB


@pytest.fixture(scope="module")
def bench_scale():
    return load_script("bench_scale")


def test_private_memory_shows_as_anon_not_file(bench_scale):
    before = bench_scale._status_kib("RssAnon")
    # fresh pages of a private anonymous mapping: malloc could hand back memory this process already holds
    with mmap.mmap(-1, 96 * 2**20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as block:
        with bench_scale.RssSplitPeaks() as peaks:  # no wait inside: the end is sampled on exit, however busy
            np.frombuffer(block, dtype=np.uint8)[:] = 1  # 96 MiB, every page touched
    assert peaks.anon >= before + 90 * MIB


def test_a_mapped_file_read_through_shows_as_file_pages(bench_scale, tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(np.arange(64 * 2**20, dtype=np.uint8).tobytes())  # 64 MiB
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        before = bench_scale._status_kib("RssFile") + bench_scale._status_kib("RssShmem")
        anon_before = bench_scale._status_kib("RssAnon")
        with bench_scale.RssSplitPeaks() as peaks:
            total = sum(mapped[i + 7] for i in range(0, len(mapped), 4096))  # touch every page
    assert total > 0
    assert peaks.file >= before + 60 * MIB
    assert peaks.anon < anon_before + 30 * MIB  # reading a mapped file allocates no private memory
