# %% [markdown]
# # Exercise 4: a ZeRO-1 optimizer step
#
# Every rank holds the full flat parameter vector `flat` (P,) and its local gradient `grad`
# (P,), the gradient of the mean loss over its own slice. The optimizer state is **sharded**:
# rank r's optimizer only knows `shard`, an `nn.Parameter` of P/n elements holding
# `flat[r·P/n : (r+1)·P/n]` (SGD with momentum here, so the state is a momentum buffer of P/n).
#
# Write `zero1_step(flat, grad, shard, optimizer, group=None)`:
# 1. reduce-scatter the gradients so that rank r gets the **mean** over ranks of its shard
#    (`dist.reduce_scatter_single(output, input)` sums);
# 2. give that to `shard.grad` and take the optimizer step (only this rank's shard changes);
# 3. all-gather the updated shards into `flat` (`dist.all_gather_single(output, input)`), so
#    every rank has every updated parameter for the next forward.
#
# The checker runs 3 steps on 2 and 3 ranks, compares `flat` with one process, and wants the
# gradients reduce-scattered (an all-reduce moves twice the bytes). Each step's `shard.grad` is
# that step's mean only: set it, do not add to the previous step's. The check calls your
# function with the whole world (`group=None`) on 2 and 3 ranks, and on 3 ranks also with
# `group=` the ranks {0, 1} (and {2} alone), each group training on its own data as a world of
# its size would: pass `group=` to every collective and use `dist.get_world_size(group)` and
# `dist.get_rank(group)`, as in exercise 1. `shard` is a copy of its slice of `flat`, with its
# own storage, not a view: the optimizer step changes `shard` only, and `flat` changes only
# through your all-gather, which writes every rank's updated shard, this rank's too.
#
# What the check holds you to: the parameters after each step (within 1e-5 relative, 1e-6 absolute
# of one process's) and the method: the gradients go through a reduce-scatter, not an all-reduce,
# and each rank keeps only its shard's optimizer state.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here the
# all-reduce, bucketed DDP, accumulation and ZeRO of `minipar.data_parallel`); the check fails an
# answer that calls it, whatever its values.
# %%
import torch
import torch.distributed as dist

from minipar.grading import check


# %%
def zero1_step(flat, grad, shard, optimizer, group=None):
    # BEGIN SOLUTION
    n = dist.get_world_size(group)
    mine = torch.empty_like(shard)  # (P/n,)
    dist.reduce_scatter_single(mine, grad, group=group)  # sum of my shard
    shard.grad = mine.div_(n)  # mean
    optimizer.step()
    dist.all_gather_single(flat, shard.detach().clone(), group=group)  # (P,)
    # END SOLUTION


# %% [check]
check("data_parallel.zero1_step", zero1_step)
