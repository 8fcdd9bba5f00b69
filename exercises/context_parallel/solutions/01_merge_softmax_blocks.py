# %% [markdown]
# # Exercise 1: merge two softmax blocks
#
# Attention of one query row over a block $X$ of keys gives two things: the block's own
# normalised output $o_X = \sum_{j\in X} e^{z_j - \mathrm{lse}_X} v_j$ and its log-sum-exp
# $\mathrm{lse}_X = \log\sum_{j\in X} e^{z_j}$ (with $z_j = q\cdot k_j/\sqrt d$).
#
# Write `merge(o_a, lse_a, o_b, lse_b)` returning `(o, lse)`: the output and log-sum-exp of
# softmax attention over the union of the two (disjoint) blocks. Shapes: `o_*` are
# (b, a, n, d), `lse_*` are (b, a, n). Requirements (the checker tries each):
#
# * exact, for logits of size ~1000 (`exp(lse)` overflows: only ever exponentiate differences
#   that are ≤ 0);
# * a block whose rows are all masked has `lse = -inf` and `o = 0`: merging it must leave the
#   other block's result unchanged (and produce no NaN);
# * both blocks can be masked at once (a row that sees no key in either): the merge then gives
#   `lse = -inf` and `o = 0`, again with no NaN;
# * do not change the inputs in place.
#
# The derivation is in the chapter's section "Online softmax".
#
# What the check holds you to: the results, and one rule. The course's code: an answer may call
# torch, the launcher and the answers of the earlier exercises it builds on, not the course's
# implementation of what the task asks (here `minipar.context_parallel`); the check fails an
# answer that calls it, whatever its values.

# %%
import torch

from minipar.grading import check


# %%
def merge(o_a, lse_a, o_b, lse_b):
    # BEGIN SOLUTION
    lse = torch.logaddexp(lse_a, lse_b)  # (b, a, n)
    ref = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    w_a = torch.exp(lse_a - ref).unsqueeze(-1)  # (b, a, n, 1), each ≤ 1
    w_b = torch.exp(lse_b - ref).unsqueeze(-1)
    return w_a * o_a + w_b * o_b, lse
    # END SOLUTION


# %% [check]
check("context_parallel.merge_softmax_blocks", merge)
