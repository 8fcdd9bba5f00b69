# %% [markdown]
# # Exercise 3: what a million tokens cost
#
# Write `usd_per_million_tokens(step_seconds, gpus, global_batch, seq, usd_per_gpu_hour)`: the
# price of training on one million tokens when each step takes `step_seconds` on `gpus` GPUs
# and consumes `global_batch` sequences of `seq` tokens, at `usd_per_gpu_hour` dollars per
# GPU-hour. The check uses, among others, the article prices of an H100 SXM ($2.69) and an
# H100 PCIe ($1.99) GPU-hour.
#
# What the check holds you to: the results, and one rule. The course's code: an answer may call
# torch, the launcher and the answers of the earlier exercises it builds on, not the course's
# implementation of what the task asks (here the planner of `minipar.cost.planner` and the grids);
# the check fails an answer that calls it, whatever its values.
# %%
from minipar.grading import check


# %%
def usd_per_million_tokens(step_seconds, gpus, global_batch, seq, usd_per_gpu_hour):
    """Dollars per 10⁶ training tokens."""
    # BEGIN SOLUTION
    gpu_hours_per_step = gpus * step_seconds / 3600
    tokens_per_step = global_batch * seq
    return gpu_hours_per_step * usd_per_gpu_hour / tokens_per_step * 1e6
    # END SOLUTION


# %% [check]
check("three_d.cost_per_token", usd_per_million_tokens)
