# %% [markdown]
# # Exercise 4: Megatron's interleaved order
#
# With `v` chunks per rank, rank `r` owns stages `r, r + p, ..., r + (v − 1)p`. Megatron-LM
# walks `m·v` units per rank. Unit `k` is a (chunk, micro-batch) pair: micro-batches go in
# groups of `p`; within a group, forwards use chunk `(k // p) mod v` and backwards the chunks in
# reverse order, `v − 1 − (k // p) mod v`; the micro-batch is `(k // (p·v))·p + k mod p`. The
# warm-up is `2(p − r − 1) + (v − 1)p` forward units (at most `m·v`), then one forward unit and
# one backward unit alternate, then the remaining backward units.
#
# Write `interleaved(rank, p, m, v)` returning rank `rank`'s actions `(op, stage, microbatch)`
# (`m` is a multiple of `p`). The checker simulates your lists and names the first slip.
#
# What the check holds you to: the results, and one rule. The course's code: an answer may call
# torch, the launcher and the answers of the earlier exercises it builds on, not the course's
# implementation of what the task asks (here `minipar.pipeline_parallel`); the check fails an
# answer that calls it, whatever its values.
# %%
from minipar.grading import check


# %%
def interleaved(rank, p, m, v):
    """Rank ``rank``'s actions in Megatron's interleaved 1F1B."""
    # BEGIN SOLUTION
    total = m * v
    warmup = min(2 * (p - rank - 1) + (v - 1) * p, total)

    def unit(k, forward):
        chunk = (k // p) % v
        if not forward:
            chunk = v - 1 - chunk
        return rank + chunk * p, (k // (p * v)) * p + k % p

    acts = [("F", *unit(k, True)) for k in range(warmup)]
    for k in range(total - warmup):
        acts += [("F", *unit(warmup + k, True)), ("B", *unit(k, False))]
    acts += [("B", *unit(k, False)) for k in range(total - warmup, total)]
    return acts
    # END SOLUTION


# %% [check]
check("pipeline_parallel.interleaved", interleaved)
