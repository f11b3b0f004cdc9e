"""Shared test set-up: offline, deterministic, one thread per test process (CI has 2 cores).

``make test`` runs the tests in two processes (pytest-xdist) on a 2-core machine: there, OpenMP threads that
wait for work sleep instead of spinning (``OMP_WAIT_POLICY=PASSIVE``, inherited by the commands tests start),
so the other process's work is not slowed by them.
"""

import os
import random
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when torch loads OpenMP below

import pytest  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MULTI30K = (REPO.parent / "shared" / "data" / "multi30k").resolve()


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    torch.manual_seed(0)
    yield
    if torch.get_num_threads() != 1:  # a training run in this process set its own
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """The real corpus beside the checkout (CI has the same ../shared)."""
    if not (MULTI30K / "val.en.gz").exists():
        raise FileNotFoundError(f"Multi30k not found at {MULTI30K}: tests need ../shared/data/multi30k")
    return MULTI30K


torch.set_num_threads(1)
