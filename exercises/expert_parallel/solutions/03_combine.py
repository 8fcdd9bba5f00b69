# %% [markdown]
# # Exercise 3: the combine, in original order
#
# After dispatch (exercise 2) each rank ran its experts on the rows it received: `out` (m, h),
# in the order received (by source rank, then local expert). The combine brings every row back
# to the rank its token came from and adds it, weighted by its gate, to that token's output:
#
# y[token[a]] += gate[a] · row a
#
# where `token` (A,) and `gate` (A,) list this rank's own A assignments **in dispatch order**
# (sorted by expert, as they were sent), `send_counts` (ep, E/ep) the rows this rank sent to each
# rank's experts and `recv_counts` (ep, E/ep) the rows it received. Write
# `combine(out, send_counts, recv_counts, token, gate, n, group)` returning y (n, h) in the
# original token order. Use the course's differentiable all-to-all,
# `all_to_all(x, out_splits, in_splits, group)` from `minipar.expert_parallel` (rows
# `in_splits[d]` go to rank d, `out_splits[s]` come from rank s), so that gradients reach both
# `out` and `gate`. The check runs on whole worlds and subgroups, top-1 and top-2.
#
# What the check holds you to: only the results. y must keep out's dtype (float64 in the check)
# and be within 1e-7 relative, 1e-9 absolute of Σ gate · expert output, and so must the
# gradients that reach `out` and `gate`. With a one-rank group the course's `all_to_all` returns
# its input: calling it is fine.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.expert_parallel`, except its `all_to_all`, which this exercise hands you); the check
# fails an answer that calls it, whatever its values.
# %%
import torch

from minipar.expert_parallel import all_to_all
from minipar.grading import check


# %%
def combine(out, send_counts, recv_counts, token, gate, n, group=None):
    """Expert outputs (m, h) in received order -> y (n, h) of this rank's tokens."""
    # BEGIN SOLUTION
    back = all_to_all(out, send_counts.sum(1).tolist(), recv_counts.sum(1).tolist(), group)
    return back.new_zeros(n, back.shape[1]).index_add(0, token, gate[:, None] * back)
    # END SOLUTION


# %% [check]
check("expert_parallel.combine", combine)
