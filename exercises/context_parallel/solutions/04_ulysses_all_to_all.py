# %% [markdown]
# # Exercise 4: Ulysses' all-to-all
#
# DeepSpeed-Ulysses (Jacobs et al. 2023) trades the sequence shard for a head shard before
# attention. Each rank holds all $a$ heads of its contiguous $s/c_p$ tokens, shape
# (b, a, s/cp, d); after one all-to-all it holds heads $[r\,a/c_p, (r+1)\,a/c_p)$ of all $s$
# tokens, shape (b, a/cp, s, d), tokens in sequence order (rank 0's tokens first).
#
# Write `seq_to_heads(x, group)` with `dist.all_to_all_single` (its dim 0 is split into equal
# parts, part j going to group rank j, and the parts received are stacked along dim 0 in
# source-rank order). If the heads are not divisible by $c_p$ raise
# `ValueError("heads (a) must be divisible by cp (c)")` with the two numbers. The checker runs
# it with the whole world and with subgroups and compares with the full tensor's slice.
#
# What the check holds you to: the values, within 1e-7 relative, 1e-9 absolute of the full
# tensor's slice (an all-to-all only moves them), in x's dtype and shape (b, a/cp, s, d); the
# `ValueError` with 5 heads at cp = 2 and 3, whose message the check compares word for word:
# `heads (5) must be divisible by cp (2)` (and `(3)`). With a one-rank group the slice is x itself: call
# the all-to-all or skip it.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.context_parallel`); the check fails an answer that calls it, whatever its values.

# %%
import torch
import torch.distributed as dist

from minipar.grading import check


# %%
def seq_to_heads(x, group=None):
    # BEGIN SOLUTION
    cp = dist.get_world_size(group)
    b, a, n, d = x.shape
    if a % cp:
        raise ValueError(f"heads ({a}) must be divisible by cp ({cp})")
    send = x.reshape(b, cp, a // cp, n, d).transpose(0, 1).contiguous()  # (cp, b, a/cp, s/cp, d)
    recv = torch.empty_like(send)  # dim 0: source rank
    dist.all_to_all_single(recv, send, group=group)
    return recv.permute(1, 2, 0, 3, 4).reshape(b, a // cp, cp * n, d)  # (b, a/cp, s, d)
    # END SOLUTION


# %% [check]
check("context_parallel.seq_to_heads", seq_to_heads)
