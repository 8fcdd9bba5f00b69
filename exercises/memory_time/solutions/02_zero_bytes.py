# %% [markdown]
# # Exercise 2: model states per GPU under ZeRO
#
# Write `zero_bytes(psi, d, stage)`: the bytes of weights, gradients and optimizer state that
# one GPU holds when a model of `psi` parameters is trained with mixed-precision Adam (2 bytes
# of bf16 weights, 2 of bf16 gradients, 12 of fp32 optimizer state per parameter) on `d`
# data-parallel GPUs with ZeRO stage `stage` (0 = plain data parallelism). Return **bytes**.
# The checker compares with ZeRO's Figure 1 (7.5B parameters, d = 64) and Table 1.
# %%
from minipar.grading import check


# %%
def zero_bytes(psi, d, stage):
    """Per-GPU model-state bytes under ZeRO-``stage`` (Rajbhandari et al. 2020, §5)."""
    # BEGIN SOLUTION
    w, g, k = 2 * psi, 2 * psi, 12 * psi
    if stage >= 1:
        k /= d                             # P_os: optimizer states sharded
    if stage >= 2:
        g /= d                             # P_os+g: gradients too
    if stage >= 3:
        w /= d                             # P_os+g+p: and the weights
    return w + g + k
    # END SOLUTION


# %% [check]
check("memory_time.zero_bytes", zero_bytes)
