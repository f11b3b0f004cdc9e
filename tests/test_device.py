"""Device names: auto picks what exists; an unusable or malformed name is a UserError naming it."""

import pytest
import torch

from mt.device import DeviceError, resolve_device
from mt.errors import UserError


def test_cpu_and_auto():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a visible GPU")
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_a_user_error_naming_the_device(name):
    with pytest.raises(UserError, match=rf"device {name} is not available \(torch was built without CUDA or no "
                                        r"GPU is visible\): use train.device=cpu"):
        resolve_device(name, key="train.device")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_gpu_index_beyond_the_visible_ones_is_a_user_error():
    n = torch.cuda.device_count()
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    with pytest.raises(DeviceError, match=rf"device cuda:{n} is not available \({n} GPU"):
        resolve_device(f"cuda:{n}")


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "", "CPU"])
def test_malformed_names_are_user_errors(name):
    with pytest.raises(DeviceError, match=rf"device={name!r} is not a device name: use one of auto, cpu"):
        resolve_device(name)


def test_devices_mt_does_not_run_on_are_refused():
    with pytest.raises(DeviceError, match="'meta': mt runs on auto, cpu"):
        resolve_device("meta")
