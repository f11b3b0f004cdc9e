"""The one place a device name from a config or a flag becomes a ``torch.device``."""

from __future__ import annotations

import torch

from mt.errors import UserError

KNOWN = "auto, cpu, cuda, cuda:N or mps"


class DeviceError(UserError):
    """The configured device does not exist or is not usable on this machine."""


def resolve_device(name: str, *, key: str = "device") -> torch.device:
    """``auto`` -> cuda when a GPU is visible, else cpu; any other name must be usable here.

    ``key`` names the setting in the message (``train.device``, ``--device``), so the user knows
    what to change.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as e:
        raise DeviceError(f"{key}={name!r} is not a device name: use one of {KNOWN}") from e
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        _check_cuda(device, key)
        return device
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError(f"device {name} is not available (no Apple GPU or torch built without MPS): "
                              f"use {key}=cpu")
        return device
    raise DeviceError(f"{key}={name!r}: mt runs on {KNOWN}")


def _check_cuda(device: torch.device, key: str) -> None:
    if not torch.cuda.is_available():
        raise DeviceError(f"device {device} is not available (torch was built without CUDA or no GPU is "
                          f"visible): use {key}=cpu")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise DeviceError(f"device {device} is not available ({count} GPU(s) visible: cuda:0..cuda:{count - 1}): "
                          f"use {key}=cuda:0 or {key}=cpu")
