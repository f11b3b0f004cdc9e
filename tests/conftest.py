"""Shared test set-up: offline, deterministic, one thread per test process (CI has 2 cores)."""

import os
import random
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MULTI30K = (REPO.parent / "shared" / "data" / "multi30k").resolve()


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """The real corpus beside the checkout (CI has the same ../shared)."""
    if not (MULTI30K / "val.en.gz").exists():
        raise FileNotFoundError(f"Multi30k not found at {MULTI30K}: tests need ../shared/data/multi30k")
    return MULTI30K


torch.set_num_threads(1)
