# %% [markdown]
# # Exercise 4: the sequence-parallel layer-norm region
#
# Under sequence parallelism (Korthikanti et al. 2022 §4.2.2) each rank holds its slice
# `x` (b, s/t, h) of the sequence. `SPLayerNorm(h, group)` applies a layer norm (replicated
# weights) to that slice, then **all-gathers along s** so that the column-parallel layer that
# follows sees the whole (b, s, h) sequence. Two things to write:
#
# 1. `GatherFromSequenceParallelRegion`, an autograd function: forward all-gather along dim 1
#    (slices in rank order); backward **reduce-scatter** along dim 1: each rank's gradient of
#    the gathered tensor is only its column shard's contribution, the ranks' contributions must
#    be summed, and each rank keeps its own s/t slice. (`dist.all_gather_single(out, inp)` and
#    `dist.reduce_scatter_single(out, inp)` work on dim 0: move s to the front.)
# 2. `finish_grads()`: the layer-norm weight and bias saw only this rank's s/t tokens, so their
#    gradients are partial: sum them over the group.
#
# Honour `group` in every collective. The checker puts a column-parallel linear after your region
# for t = 1, 2 and 3 (the whole world, and TP groups that are not) and compares the output, the
# gradient of `x` and the layer-norm gradients with one process on the whole sequence.
#
# What the check holds you to: only the results: the gathered output and the gradients in float64
# within 1e-7 relative, 1e-9 absolute of one process's (an all-reduce then a slice is an accepted,
# if chattier, reduce-scatter).
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.tensor_parallel`, except f and g (`copy_to_tp_region`, `reduce_from_tp_region`), the
# answers of exercise 1); the check fails an answer that calls it, whatever its values.
# %%
import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.grading import check


# %%
class GatherFromSequenceParallelRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):  # x (b, s/t, h)
        # BEGIN SOLUTION
        ctx.group = group
        t = dist.get_world_size(group)
        xs = x.transpose(0, 1).contiguous()  # (s/t, b, h)
        out = xs.new_empty((xs.shape[0] * t, *xs.shape[1:]))  # (s, b, h)
        dist.all_gather_single(out, xs, group=group)
        return out.transpose(0, 1).contiguous()  # (b, s, h)
        # END SOLUTION

    @staticmethod
    def backward(ctx, grad):  # grad (b, s, h)
        # BEGIN SOLUTION
        t = dist.get_world_size(ctx.group)
        gs = grad.transpose(0, 1).contiguous()  # (s, b, h)
        out = gs.new_empty((gs.shape[0] // t, *gs.shape[1:]))  # (s/t, b, h)
        dist.reduce_scatter_single(out, gs, group=ctx.group)
        return out.transpose(0, 1).contiguous(), None  # (b, s/t, h)
        # END SOLUTION


class SPLayerNorm(nn.Module):
    def __init__(self, h, group=None):
        super().__init__()
        self.ln, self.group = nn.LayerNorm(h), group

    def forward(self, x):  # (b, s/t, h) -> (b, s, h)
        return GatherFromSequenceParallelRegion.apply(self.ln(x), self.group)

    def finish_grads(self):
        # BEGIN SOLUTION
        for p in self.ln.parameters():
            dist.all_reduce(p.grad, group=self.group)
        # END SOLUTION


# %% [check]
check("tensor_parallel.sp_layernorm", SPLayerNorm)
