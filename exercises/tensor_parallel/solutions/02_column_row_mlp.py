# %% [markdown]
# # Exercise 2: a column → row parallel MLP
#
# `ParallelMLP(fc1, fc2, group)` receives the **full** layers of the MLP
# `y = fc2(gelu(fc1(x)))` (`fc1`: h → 4h, `fc2`: 4h → h, `nn.Linear`, weight shape (out, in))
# and keeps only this rank's shards, Megatron's way:
#
# * `fc1` is **column**-parallel: rank r keeps rows `r·4h/t … (r+1)·4h/t` of `fc1.weight` and of
#   `fc1.bias` (its slice of the output features);
# * `fc2` is **row**-parallel: rank r keeps columns `r·4h/t … (r+1)·4h/t` of `fc2.weight` (its
#   slice of the input features) and the whole bias.
#
# `forward(x)` takes the replicated (b, s, h) input and returns the replicated (b, s, h) output.
# Use the operators of Exercise 1 from `minipar.tensor_parallel` (`copy_to_tp_region`,
# `reduce_from_tp_region`): where does each go, and where is the bias of `fc2` added? Nothing
# else from `minipar.tensor_parallel` (its `ColumnParallelLinear` is this exercise's answer).
# The checker compares output, input gradient and each weight gradient (as a slice of the full
# one) with the unsharded MLP for t = 1, 2 and 3, with `group` the whole world or one TP group of
# several (use the rank and size *in the group*).
#
# **How "each rank stores 1/t of the weights" is measured:** the checker adds up, on each rank,
# the bytes of the storage behind your module's parameters (`p.untyped_storage().nbytes()`, each
# storage counted once) and requires at most the shards' size,
# (4h·h + 4h + h·4h)/t + h elements of 8 bytes. A slice such as `fc1.weight[rows]` is a *view*:
# it shares the full weight's storage, so the rank would still hold every weight. The shard
# must be a tensor of its own.
#
# What the check holds you to: only the results: the output and every gradient in float64 within
# 1e-7 relative, 1e-9 absolute of the unsharded MLP's, with shards that are copies of the full
# weights (not views). With a one-rank group the shard is the whole MLP.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.tensor_parallel`, except f and g (`copy_to_tp_region`, `reduce_from_tp_region`), the
# answers of exercise 1); the check fails an answer that calls it, whatever its values.
# %%
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from minipar.grading import check
from minipar.tensor_parallel import copy_to_tp_region, reduce_from_tp_region


# %%
class ParallelMLP(nn.Module):
    def __init__(self, fc1: nn.Linear, fc2: nn.Linear, group=None):
        super().__init__()
        self.group = group
        # BEGIN SOLUTION
        t, r = dist.get_world_size(group), dist.get_rank(group)
        n = fc1.out_features // t
        self.w1 = nn.Parameter(fc1.weight.detach()[r * n : (r + 1) * n].clone())  # (4h/t, h)
        self.b1 = nn.Parameter(fc1.bias.detach()[r * n : (r + 1) * n].clone())  # (4h/t,)
        self.w2 = nn.Parameter(fc2.weight.detach()[:, r * n : (r + 1) * n].clone())  # (h, 4h/t)
        self.b2 = nn.Parameter(fc2.bias.detach().clone())  # (h,)
        # END SOLUTION

    def forward(self, x):  # x (b, s, h)
        # BEGIN SOLUTION
        u = F.gelu(F.linear(copy_to_tp_region(x, self.group), self.w1, self.b1))  # (b, s, 4h/t)
        y = reduce_from_tp_region(F.linear(u, self.w2), self.group)  # (b, s, h)
        return y + self.b2
        # END SOLUTION


# %% [check]
check("tensor_parallel.column_row_mlp", ParallelMLP)
