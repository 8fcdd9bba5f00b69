# %% [markdown]
# # Exercise 3: split the backward into B and W
#
# Zero-bubble schedules split a stage's backward in two. **B** computes only the gradient of
# the stage's input `x` (the previous stage is waiting for it); **W** computes the gradients of
# the weights later, when the rank would otherwise be idle. Both start from `grad_y`, the
# gradient of the stage's output `y`.
#
# Write, with `torch.autograd.grad`:
#
# * `backward_input(y, x, grad_y)` returning the gradient of `x`, leaving every weight's
#   `.grad` untouched and the graph alive for W;
# * `backward_weight(y, params, grad_y)` adding the weights' gradients to their `.grad`
#   (several micro-batches accumulate).
#
# The checker runs B for two micro-batches, then both W's, and compares with full backwards.
#
# What the check holds you to: x's gradient in x's dtype and shape, within 1e-10 absolute; the
# weights' gradients added to `.grad` (never overwritten), within 1e-10.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.pipeline_parallel`, except the stage the check hands you); the check fails an answer
# that calls it, whatever its values.
# %%
import torch

from minipar.grading import check


# %%
def backward_input(y, x, grad_y):
    """B: the input gradient only."""
    # BEGIN SOLUTION
    (gx,) = torch.autograd.grad(y, [x], grad_y, retain_graph=True)
    return gx
    # END SOLUTION


def backward_weight(y, params, grad_y):
    """W: accumulate the weight gradients into .grad."""
    # BEGIN SOLUTION
    for q, g in zip(params, torch.autograd.grad(y, params, grad_y)):
        q.grad = g if q.grad is None else q.grad + g
    # END SOLUTION


# %% [check]
check("pipeline_parallel.bw_split", (backward_input, backward_weight))
