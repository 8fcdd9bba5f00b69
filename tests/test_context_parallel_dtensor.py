"""Our ring attention against torch's ``context_parallel``. On CPU/gloo torch's version cannot
run (its ring handler covers the CUDA SDPA kernels only): the first test pins that reason, so
the day it runs on CPU this test fails and the comparison can move to CI. The comparison itself
needs one GPU per rank (NCCL)."""

import pytest
import torch

from minipar.context_parallel import dtensor as D
from minipar.runtime.launch import run


@pytest.mark.slow
def test_torch_context_parallel_has_no_cpu_ring_kernel():
    for said in run(D.cpu_attempt_on_rank, 2, backend="gloo"):
        assert said.startswith(
            "NotImplementedError: Operator aten._scaled_dot_product_flash_attention_for_cpu"
        ), said


@pytest.mark.gpu
@pytest.mark.slow
def test_ring_attention_equals_torch_context_parallel_on_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs (one per rank, NCCL)")
    for d in run(D.compare_on_rank, 2, backend="nccl"):
        assert d["ours-theirs"] < 2e-2 and d["ours-full"] < 2e-2, d  # bfloat16 inputs
