# %% [markdown]
# # Exercise 4: capacity dropping
#
# With a capacity factor, an expert accepts at most C assignments per step (GShard §2.2,
# Switch §2.2). Which ones it keeps must be stated so that every rank and the one-process
# reference drop the same: here an expert accepts assignments in **priority order**: every
# token's first choice, in token order, then every token's second choice, and so on (slot first,
# then token index). Assignments past the first C of their expert are dropped.
#
# Write `keep_mask(experts, num_experts, capacity)` for the choices `experts` (n, K) of n tokens;
# return a bool tensor (n, K), True where the assignment is kept. The check tries several
# shapes and capacities, including a capacity no expert reaches and a capacity of 1.
#
# What the check holds you to: a bool mask of shape (n, K), exactly the reference's.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.expert_parallel`); the check fails an answer that calls it, whatever its values.
# %%
import torch

from minipar.grading import check


# %%
def keep_mask(experts, num_experts, capacity):
    """(n, K) choices -> (n, K) bool: kept among the first `capacity` of its expert's queue."""
    # BEGIN SOLUTION
    n, K = experts.shape
    seen = torch.zeros(num_experts, dtype=torch.long)
    keep = torch.zeros(n, K, dtype=torch.bool)
    for j in range(K):  # slot first ...
        for i in range(n):  # ... then token index
            e = int(experts[i, j])
            keep[i, j] = bool(seen[e] < capacity)
            seen[e] += 1
    return keep
    # END SOLUTION


# %% [check]
check("expert_parallel.keep_mask", keep_mask)
