# %% [markdown]
# # Exercise 3: gradient accumulation without needless synchronisation
#
# A rank processes its slice of the batch as `k` micro-batches. Write
# `accumulation_step(model, dp, micro_batches, loss_fn)`: forward and backward over every
# `(x, y)` in `micro_batches` so that `.grad` ends up holding the gradient of the **mean loss
# over all of them**, averaged over ranks, with **one** all-reduce per step. The micro-batches
# are of equal size, so the mean over all of them is the mean of the micro-batches' mean losses
# (each divided by their number), which is also the mean over the slice's samples. The model's
# `.grad` is `None` when the check calls you: there is nothing to zero first.
#
# `dp` is a `minipar.data_parallel.BucketedDataParallel`: backward launches its all-reduces from
# gradient hooks, `with dp.no_sync():` turns that off, and `dp.finish()` waits for the
# all-reduces and writes the averaged gradients. Run one forward and one backward per
# micro-batch. The checker uses 3 ranks and 4 micro-batches.
#
# What the check holds you to: the gradients (within 1e-5 relative, 1e-6 absolute of one process's
# on the global batch) and the method: one backward per micro-batch and one all-reduce per step.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here the
# all-reduce, accumulation and ZeRO of `minipar.data_parallel`; the `dp` you are handed is the
# course's bucketed DDP, and calling its methods is the exercise); the check fails an answer that
# calls it, whatever its values.
# %%
import contextlib

from minipar.grading import check


# %%
def accumulation_step(model, dp, micro_batches, loss_fn):
    # BEGIN SOLUTION
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        with contextlib.nullcontext() if last else dp.no_sync():
            (loss_fn(model(x), y) / k).backward()
    dp.finish()
    # END SOLUTION


# %% [check]
check("data_parallel.accumulation", accumulation_step)
