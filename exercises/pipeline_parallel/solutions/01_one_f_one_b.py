# %% [markdown]
# # Exercise 1: write the 1F1B schedule
#
# A pipeline schedule is, for each rank, an ordered list of actions `(op, stage, microbatch)`:
# `("F", s, i)` runs the forward of micro-batch `i` on stage `s`, `("B", s, i)` its backward.
# With one stage per rank, rank `r` owns stage `r`.
#
# Write `one_f_one_b(rank, p, m)`: the list rank `rank` of `p` runs in the 1F1B schedule
# (PipeDream-Flush) for `m` micro-batches: a **warm-up** of forwards, then alternate one
# forward and one backward, then a **cool-down** of the remaining backwards. The warm-up must
# be just long enough that the last rank's first backward can start as soon as its first
# forward is done, and no longer: rank `r` then holds at most `p − r` micro-batches.
#
# The checker simulates your lists for several `p` and `m` (a deadlock, a wrong stage, a
# warm-up off by one or too many micro-batches in flight is named), then trains one step with
# them on 3 gloo ranks and compares the gradients with one process.
#
# What the check holds you to: the results, and one rule. The course's code: an answer may call
# torch, the launcher and the answers of the earlier exercises it builds on, not the course's
# implementation of what the task asks (here `minipar.pipeline_parallel`); the check fails an
# answer that calls it, whatever its values.
# %%
from minipar.grading import check


# %%
def one_f_one_b(rank, p, m):
    """Rank ``rank``'s 1F1B actions [(op, stage, microbatch), ...]."""
    # BEGIN SOLUTION
    warmup = min(p - rank - 1, m)
    acts = [("F", rank, i) for i in range(warmup)]
    for i in range(m - warmup):
        acts += [("F", rank, warmup + i), ("B", rank, i)]
    acts += [("B", rank, i) for i in range(m - warmup, m)]
    return acts
    # END SOLUTION


# %% [check]
check("pipeline_parallel.one_f_one_b", one_f_one_b)
