"""mt-serve's command line: bad flags and files are one clear line and an exit status, before anything serves."""

from __future__ import annotations

import socket

import pytest
from export_helpers import untrained_checkpoint

from mt.cli.serve import main


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return untrained_checkpoint(tmp_path_factory.mktemp("serve_cli") / "untrained.pt")


def run(capsys, *argv: str) -> tuple[int, str]:
    """(exit status, stderr) of ``mt-serve ARGV`` run in this process."""
    status = main(list(argv))
    return status, capsys.readouterr().err.strip()


def test_a_missing_checkpoint_is_one_line(capsys, tmp_path):
    status, err = run(capsys, "--ckpt", str(tmp_path / "none.pt"), "--port", "0")
    assert status == 1 and err == f"mt-serve: error: checkpoint not found: {tmp_path / 'none.pt'}"


def test_a_ct2_directory_beside_a_checkpoint_is_checked_at_start(capsys, ckpt, tmp_path):
    status, err = run(capsys, "--ckpt", str(ckpt), "--ct2", str(tmp_path), "--port", "0")
    assert status == 1
    assert err.startswith(f"mt-serve: error: --ct2 {tmp_path}: no model.bin")


def test_a_ct2_directory_without_a_model_is_named(capsys, tmp_path):
    status, err = run(capsys, "--ct2", str(tmp_path), "--port", "0")
    assert status == 1 and "no model.bin" in err and str(tmp_path) in err


def test_api_keys_file_missing_or_empty(capsys, ckpt, tmp_path):
    status, err = run(capsys, "--ckpt", str(ckpt), "--api-keys", str(tmp_path / "keys.txt"), "--port", "0")
    assert status == 1 and "keys.txt" in err and "No such file" in err
    (tmp_path / "keys.txt").write_text("# no key yet\n\n")
    status, err = run(capsys, "--ckpt", str(ckpt), "--api-keys", str(tmp_path / "keys.txt"), "--port", "0")
    assert status == 1 and err.endswith("no key in the file (one key a line)")


def test_a_port_in_use_is_named(capsys, ckpt):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, err = run(capsys, "--ckpt", str(ckpt), "--port", str(port))
    assert status == 1 and err.startswith(f"mt-serve: error: cannot listen on 127.0.0.1:{port}: ")


def test_a_bad_number_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:  # argparse
        main(["--max-batch-tokens", "0"])
    assert exit_.value.code == 2
    assert "--max-batch-tokens: must be in [1, inf], got 0" in capsys.readouterr().err


def test_the_main_thread_loads_the_model_on_one_torch_thread(ckpt):
    """Regression: a main thread that ran 2-thread torch work left its OpenMP team behind, and the decoding
    worker's team shared the 2 cores with it (mt-serve decoded at half of mt-translate's speed)."""
    import torch

    from mt.cli.serve import load_engine, parse_args
    from mt.serve.engine import Options

    torch.set_num_threads(2)
    try:
        engine = load_engine(parse_args(["--ckpt", str(ckpt), "--threads", "2"]))
        assert torch.get_num_threads() == 1
        assert len(engine.translate(["one"], Options())) == 1
    finally:
        torch.set_num_threads(1)


def test_several_checkpoints_serve_as_one_ensemble(ckpt):
    from mt.cli.serve import load_engine, parse_args
    from mt.model import Ensemble

    engine = load_engine(parse_args(["--ckpt", str(ckpt), str(ckpt), "--port", "0"]))
    assert isinstance(engine.translator.model, Ensemble)
    assert engine.description.startswith(f"{ckpt} + {ckpt} on ")
