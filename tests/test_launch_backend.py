"""One place decides the backend and the device (no ranks started: fast)."""

import pytest
import torch

from minipar.runtime import device, launch


@pytest.mark.parametrize(
    "gpus, ranks, want",
    [(0, 1, "gloo"), (0, 2, "gloo"), (2, 2, "nccl"), (3, 2, "nccl"), (2, 3, "gloo")],
)
def test_auto_is_nccl_only_with_one_gpu_per_rank(monkeypatch, gpus, ranks, want):
    monkeypatch.setattr(device, "gpu_count", lambda: gpus)
    assert device.resolve_backend("auto", ranks) == want
    assert launch.choose_backend("auto", ranks) == want
    assert device.resolve_backend("gloo", ranks) == "gloo"  # an explicit choice is kept


def test_nccl_without_a_gpu_per_rank_names_both_numbers(monkeypatch):
    monkeypatch.setattr(device, "gpu_count", lambda: 2)
    with pytest.raises(ValueError, match=r"world_size \(3\) > GPUs visible \(2\)"):
        launch.choose_backend("nccl", 3)
    with pytest.raises(ValueError, match="backend must be one of .* got 'mpi'"):
        device.resolve_backend("mpi", 2)


def test_devices_follow_the_backend(monkeypatch):
    monkeypatch.delenv("MINIPAR_DEVICE", raising=False)
    monkeypatch.setattr(device, "gpu_count", lambda: 0)
    assert device.get_device() == torch.device("cpu")
    assert device.default_device() == torch.device("cpu")
    monkeypatch.setattr(device, "gpu_count", lambda: 1)
    assert device.default_device() == torch.device("cuda", 0)  # single process: the first GPU
    device.set_backend("gloo")
    try:
        assert device.default_device() == torch.device("cpu")  # a gloo rank stays on the CPU
    finally:
        device.set_backend(None)
    device.synchronize()  # a no-op on the CPU


def test_the_loopback_interface_exists_here():
    import socket

    from minipar.runtime import pool as _pool

    assert _pool.loopback_interface() in [name for _, name in socket.if_nameindex()]
