# %% [markdown]
# # Exercise 2: the zigzag shard
#
# Under a causal mask, token $i$ attends to $i + 1$ keys, so a contiguous split of the sequence
# over $c_p$ ranks gives the last rank $c_p$ times the first rank's attention work. The zigzag
# layout (Megatron-LM, Llama 3) cuts the sequence into $2c_p$ equal chunks and gives rank $r$
# chunks $r$ and $2c_p - 1 - r$, **concatenated in that order**.
#
# Write `zigzag_shard(x, dim, group)`: this rank's zigzag shard of the full tensor `x` along
# dimension `dim`, where $c_p$ and $r$ are the size of `group` and this rank's rank in it
# (`group=None`: the default group). No communication is needed. The checker runs it on gloo
# ranks with the whole world and with subgroups ({0} next to {1, 2}; {0, 2} next to {1, 3}), on
# dims 1 and 2, and compares with the positions the layout defines.
#
# What the check holds you to: the values of the shard, exactly, in x's dtype (a view or a copy
# both pass); for a one-rank group the shard is the whole of x (chunks 0 and 1 of 2). The check
# uses only lengths divisible by 2cp; for another length raise a `ValueError` naming the rule
# (not graded).
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.context_parallel`); the check fails an answer that calls it, whatever its values.

# %%
import torch
import torch.distributed as dist

from minipar.grading import check


# %%
def zigzag_shard(x, dim, group=None):
    # BEGIN SOLUTION
    cp, r = dist.get_world_size(group), dist.get_rank(group)
    chunks = x.chunk(2 * cp, dim=dim)  # 2cp × (…, s/2cp, …)
    return torch.cat([chunks[r], chunks[2 * cp - 1 - r]], dim=dim).contiguous()
    # END SOLUTION


# %% [check]
check("context_parallel.zigzag_shard", zigzag_shard)
