# %% [markdown]
# # Exercise 2: send and receive between stages
#
# Write the core of a pipeline executor: one GPipe step (all forwards, then all backwards) on
# rank `rank` of `p`, with blocking `dist.send` / `dist.recv`.
#
# * `stage` is this rank's part of a GPT: on rank 0 it takes tokens `(b, s)`, elsewhere the
#   activation `(b, s, h)`; on the last rank it returns logits `(b, s, V)`.
# * Forward of micro-batch `i`: rank 0 uses `microbatches[i]`; other ranks receive the
#   activation (`shape` = `(b, s, h)`, float64) from `rank − 1`. Autograd does not cross ranks:
#   `dist.send` copies only the values (sending `y` or `y.detach()` is the same), and the
#   received buffer is a fresh tensor with no history, so the receiver must mark it as
#   requiring grad to get the gradient of what it received. Non-last ranks send their output to
#   `rank + 1` and keep it, to back-propagate into later. The last rank computes
#   `loss(logits, targets[i])`, scaled so that the summed gradients equal the gradient of the
#   mean loss over the whole batch.
# * Backward of micro-batch `i`: the last rank back-propagates its loss; the others receive the
#   gradient of their output from `rank + 1`. Every rank but 0 sends the gradient of its input
#   to `rank − 1`.
#
# The checker runs it on 2 and 3 gloo ranks and compares every gradient with one process.
#
# What the check holds you to: only the results: every rank's gradients within 1e-9 absolute of
# one process's on the same micro-batches (float64).
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.pipeline_parallel`, except the stage the check hands you); the check fails an answer
# that calls it, whatever its values.
# %%
import torch
import torch.distributed as dist
import torch.nn.functional as F

from minipar.grading import check


def loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # (b·s, V) vs (b·s,)


# %%
def gpipe_step(stage, rank, p, microbatches, targets, shape):
    """One GPipe step; leaves the gradients in stage's parameters' .grad."""
    # BEGIN SOLUTION
    m = len(microbatches)
    held = []
    for i in range(m):
        if rank == 0:
            x = microbatches[i]
        else:
            x = torch.empty(shape, dtype=torch.float64)
            dist.recv(x, rank - 1)
            x.requires_grad_()
        y = stage(x)
        if rank == p - 1:
            y = loss(y, targets[i]) / m
        else:
            dist.send(y.detach(), rank + 1)
        held.append((x, y))
    for x, y in held:
        if rank == p - 1:
            y.backward()
        else:
            g = torch.empty(shape, dtype=torch.float64)
            dist.recv(g, rank + 1)
            y.backward(g)
        if rank > 0:
            dist.send(x.grad, rank - 1)
    # END SOLUTION


# %% [check]
check("pipeline_parallel.gpipe_send_recv", gpipe_step)
