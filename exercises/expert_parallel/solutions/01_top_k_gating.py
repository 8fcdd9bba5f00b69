# %% [markdown]
# # Exercise 1: top-K gating
#
# A mixture-of-experts router turns each token's E logits into the K experts it is sent to and
# the weights of their outputs (Shazeer et al. 2017; Mixtral, Jiang et al. 2024, Eq. 1):
#
# * p = softmax of the logits over the E experts (for each token: the last dimension);
# * the token's experts are the K with the largest p, **largest first**;
# * their gates are those K probabilities **renormalised to sum to 1**.
#
# Write `top_k_gates(logits, k)` for logits of shape (n, E); return `(gates, experts)`, both of
# shape (n, k): `gates` float, `experts` int64. It must stay differentiable with respect to the
# logits (the router learns through the gates). The check compares values and gradients with a
# reference on several shapes, k = 1 to 3.
#
# What the check holds you to: the gates in the logits' dtype within 1e-7 relative, 1e-9 absolute
# of the reference, with the same gradient; the experts int64 and exactly the reference's, largest
# probability first.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.expert_parallel`); the check fails an answer that calls it, whatever its values.
# %%
import torch

from minipar.grading import check


# %%
def top_k_gates(logits, k):
    """(n, E) logits -> gates (n, k) summing to 1 per token, experts (n, k), largest p first."""
    # BEGIN SOLUTION
    probs = torch.softmax(logits, dim=-1)  # (n, E)
    top_p, experts = probs.topk(k, dim=-1)  # (n, k), (n, k)
    return top_p / top_p.sum(-1, keepdim=True), experts
    # END SOLUTION


# %% [check]
check("expert_parallel.top_k_gates", top_k_gates)
