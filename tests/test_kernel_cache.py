"""bound_kernel_caches: bf16 training's memory stops growing with every new matmul shape (inference's bound:
``test_packed_linear.py``)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from helpers import tiny_config

from mt.config import ConfigError, compose
from mt.kernel_cache import CAPACITY_ENVS, bound_kernel_caches
from mt.train.setup import build_components, cpu_has_native_bf16


@pytest.fixture
def clean_env(monkeypatch):
    for name in CAPACITY_ENVS:
        monkeypatch.setenv(name, "1")  # monkeypatch then restores whatever the process had
        monkeypatch.delenv(name)
    return monkeypatch


def test_sets_both_capacities_and_says_when_it_replaces_the_environments(clean_env, caplog) -> None:
    bound_kernel_caches(16)
    assert [os.environ[n] for n in CAPACITY_ENVS] == ["16", "16"]
    clean_env.setenv("LRU_CACHE_CAPACITY", "512")
    with caplog.at_level(logging.INFO, logger="mt.kernel_cache"):
        bound_kernel_caches(8)
    assert [os.environ[n] for n in CAPACITY_ENVS] == ["8", "8"]
    assert "replaces LRU_CACHE_CAPACITY=512 from the environment" in caplog.text


def test_with_environment_wins_a_capacity_from_the_environment_stays(clean_env, caplog) -> None:
    clean_env.setenv("LRU_CACHE_CAPACITY", "512")
    with caplog.at_level(logging.INFO, logger="mt.kernel_cache"):
        bound_kernel_caches(256, environment_wins=True)
    assert [os.environ[n] for n in CAPACITY_ENVS] == ["256", "512"]
    assert "replaces" not in caplog.text


def test_minus_one_leaves_the_libraries_own_settings(clean_env) -> None:
    clean_env.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "512")
    bound_kernel_caches(-1)
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "512"
    assert "LRU_CACHE_CAPACITY" not in os.environ


def test_zero_is_refused(clean_env) -> None:  # LRU_CACHE_CAPACITY=0 segfaults torch 2.13's first bf16 matmul
    with pytest.raises(ValueError, match="must be >= 1"):
        bound_kernel_caches(0)
    assert not any(n in os.environ for n in CAPACITY_ENVS)


@pytest.mark.parametrize("value", ["0", "-2"])
def test_config_rejects_zero_and_below_minus_one(value) -> None:
    with pytest.raises(ConfigError, match=f"train.kernel_cache_capacity={value}: must be >= 1"):
        compose([f"train.kernel_cache_capacity={value}"])


def test_build_components_bounds_the_caches_before_training(clean_env, tmp_path) -> None:
    build_components(tiny_config(tmp_path, "train.kernel_cache_capacity=7"))
    assert [os.environ[n] for n in CAPACITY_ENVS] == ["7", "7"]


# 60 bf16 linears, forward and both backward matmuls, each with a new row count (as token batches are).
_GROWTH = """
import os, sys, torch
from mt.kernel_cache import bound_kernel_caches
bound_kernel_caches(int(sys.argv[1]))
torch.set_num_threads(1)
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
w = torch.randn(1024, 256, requires_grad=True)
for i, rows in enumerate(range(1240, 1000, -4)):  # shrinking: the heap reuses the first blocks
    x = torch.randn(rows, 256, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.nn.functional.linear(x, w)
    y.float().sum().backward()
    if i == 0:
        start = rss()
print(rss() - start)
"""


def _rss_growth(capacity: int) -> int:
    env = {k: v for k, v in os.environ.items() if k not in CAPACITY_ENVS}
    cmd = [sys.executable, "-c", _GROWTH, str(capacity)]
    return int(subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout.split()[-1])


@pytest.mark.skipif(sys.platform != "linux" or not cpu_has_native_bf16(), reason="oneDNN bf16 kernels, /proc")
def test_bounded_caches_stop_the_growth_with_new_shapes() -> None:
    unbounded, bounded = _rss_growth(-1), _rss_growth(32)  # -1: the libraries' 1024 kernels each
    # measured: ~120 MiB against ~39 MiB (~26 MiB keeping 16)
    assert unbounded > 80 * 2**20, f"the default caches grew only {unbounded / 2**20:.0f} MiB"
    assert bounded < 0.5 * unbounded, f"{bounded / 2**20:.0f} MiB with 32 kept vs {unbounded / 2**20:.0f} MiB"
