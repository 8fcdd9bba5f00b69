"""Worker functions for the multi-node torchrun test (tests/test_run_torchrun.py), started as
``python -m minipar.runtime.run multinode_workers:FUNCTION`` with this folder on PYTHONPATH. Test-only:
they live with the tests, not in the package."""

import os
import signal
import socket


def dp_and_3d_step(rank: int, world_size: int) -> dict:
    """The data-parallel training step (bucketed, float64) and the 3D chapter's training step
    (d·t·p = world_size: TP inside a node, the pipeline across nodes), each against the
    single-process reference computed on this rank."""
    import torch

    from minipar.data_parallel.models import TiedClassifier, token_batches
    from minipar.data_parallel.train import max_param_error, train_rank, train_reference
    from minipar.three_d.grid import RankGrid
    from minipar.three_d.train import Workload, train_3d_on_rank

    torch.manual_seed(0)
    ref = train_reference(TiedClassifier().double(), "adam", token_batches(2, 4 * world_size))[1]
    torch.manual_seed(0)
    _, params = train_rank(
        rank,
        world_size,
        "bucketed",
        TiedClassifier().double(),
        "adam",
        token_batches(2, 4 * world_size),
    )
    grid = RankGrid(1, 2, world_size // 2)
    three_d = train_3d_on_rank(rank, world_size, grid, (None,), work=Workload(steps=2))["correct"]
    return {
        "host": socket.gethostname(),
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "group_rank": int(os.environ["GROUP_RANK"]),
        "dp_param_error": max_param_error(params, ref),
        "3d_param_error": three_d["params"],
        "3d_grad_error": three_d["grads"],
        "3d_loss_error": three_d["loss"],
    }


def die_mid_run(rank: int, world_size: int) -> None:
    """All-reduce in a loop; the last rank is SIGKILLed after the first one (a crashed node)."""
    import torch
    import torch.distributed as dist

    x = torch.ones(4)
    for step in range(1000):
        dist.all_reduce(x)
        if step == 1 and rank == world_size - 1:
            os.kill(os.getpid(), signal.SIGKILL)
