"""Checkpoints: atomic writes, clear errors for broken files, no code execution on load."""

import errno
import os
import pickle

import pytest
import torch

from mt import checkpoint as ckpt


def _state(value: float) -> dict:
    return {"model": {"w": torch.full((3,), value)}, "config": {"name": "x"}}


def test_roundtrip_and_link(tmp_path):
    path = ckpt.save_checkpoint(tmp_path / "checkpoint_1.pt", _state(1.0))
    ckpt.link_checkpoint(path, tmp_path / "last.pt")
    assert torch.equal(ckpt.load_checkpoint(tmp_path / "last.pt")["model"]["w"], torch.ones(3))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_truncated_checkpoint_fails_clearly_and_previous_still_loads(tmp_path):
    good = ckpt.save_checkpoint(tmp_path / "checkpoint_1.pt", _state(1.0))
    bad = ckpt.save_checkpoint(tmp_path / "checkpoint_2.pt", _state(2.0))
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ckpt.CheckpointError, match=r"checkpoint_2\.pt is corrupted or truncated"):
        ckpt.load_checkpoint(bad)
    assert ckpt.load_checkpoint(good)["model"]["w"][0] == 1.0


def test_interrupted_write_never_replaces_the_good_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    ckpt.save_checkpoint(path, _state(1.0))

    def dying_save(obj, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # killed half-way

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(path, _state(2.0))
    monkeypatch.undo()
    assert ckpt.load_checkpoint(path)["model"]["w"][0] == 1.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temp file left


def test_disk_full_gives_clear_error_and_keeps_previous(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    ckpt.save_checkpoint(path, _state(1.0))

    def full_fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_fsync)
    with pytest.raises(ckpt.CheckpointError, match="disk is full.*previous one is intact"):
        ckpt.save_checkpoint(path, _state(2.0))
    monkeypatch.undo()
    assert ckpt.load_checkpoint(path)["model"]["w"][0] == 1.0


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_malicious_pickle_is_refused_without_running_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        torch.save({"model": {}, "config": {}, "x": _Evil()}, f, pickle_module=pickle)
    with pytest.raises(ckpt.CheckpointError, match="evil.pt"):
        ckpt.load_checkpoint(path)
    assert not (tmp_path / "PWNED").exists()


def test_missing_and_foreign_files(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="not found"):
        ckpt.load_checkpoint(tmp_path / "nope.pt")
    torch.save({"weights": torch.zeros(1)}, tmp_path / "foreign.pt")
    with pytest.raises(ckpt.CheckpointError, match="not an mt checkpoint"):
        ckpt.load_checkpoint(tmp_path / "foreign.pt")


def test_prune_keeps_newest_and_average_is_the_mean(tmp_path):
    for step in (1, 2, 3, 4):
        ckpt.save_checkpoint(tmp_path / f"checkpoint_{step}.pt", _state(float(step)))
    avg = ckpt.average_checkpoints([p for _, p in ckpt.list_checkpoints(tmp_path)][-2:])
    assert torch.allclose(avg["model"]["w"], torch.full((3,), 3.5))
    ckpt.prune_checkpoints(tmp_path, keep_last=2)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [3, 4]
