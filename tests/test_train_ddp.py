"""torchrun end to end: 2 gloo ranks train, validate (sharded) and checkpoint; a single process resumes from them."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import TINY

from mt import checkpoint as ckpt


def test_torchrun_two_ranks_then_resume_on_one(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    assert torchrun.exists() or shutil.which("torchrun"), "torchrun comes with torch"
    args = [*TINY, f"train.run_dir={tmp_path / 'run'}", f"data.cache_dir={tmp_path / 'cache'}",
            "train.threads=1", "train.validate_every=1000", "train.save_every=1000"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "mt.train", *args, "train.max_updates=4",
         "train.valid_bleu=true"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    state = ckpt.load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert state["world_size"] == 2 and len(state["rng"]) == 2 and state["train_state"]["step"] == 4
    assert two.stdout.count("Finished (max_updates)") == 1  # only rank 0 reports
    steps = [line for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    assert len(steps) == 4  # only rank 0 logs
    valid = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
             if '"valid"' in line]
    assert len(valid) == 1 and valid[0]["step"] == 4  # the final validation, both ranks decoding their share
    assert valid[0]["loss"] > 0 and 0 <= valid[0]["bleu"] <= 100 and "bleu_signature" in valid[0]

    one = subprocess.run([sys.executable, "-m", "mt.train", *args, "train.max_updates=6"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    output = one.stdout + one.stderr  # Hydra's log handler writes to stdout
    assert "Resumed from" in output and "resuming with 1 ranks from a checkpoint written by 2" in output
    resumed = ckpt.load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert resumed["world_size"] == 1 and resumed["train_state"]["step"] == 6
    assert resumed["train_state"]["epoch"] >= state["train_state"]["epoch"] + 1
