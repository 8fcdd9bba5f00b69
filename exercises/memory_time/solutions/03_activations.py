# %% [markdown]
# # Exercise 3: activation memory of one layer
#
# Write `activation_bytes(s, b, h, a, t, sp, recompute)`: the bytes one transformer layer keeps
# for the backward pass of one micro-batch of `b` sequences of length `s`, on one of `t`
# tensor-parallel GPUs, with sequence parallelism on or off (`sp`) and `recompute` one of
# `"none"`, `"selective"`, `"full"` (Korthikanti et al. 2022, Table 2; 16-bit activations and
# 1-byte dropout masks). Return **bytes**. The checker uses GPT-3 175B's shape.
#
# With `recompute="full"` a layer keeps only its input: 2sbh bytes without sequence
# parallelism, as Table 2 lists it, and 2sbh/t with it (`sp=True` splits that input over the t
# GPUs along the sequence, as it splits the 10sbh of the other case): the check wants 2sbh/t
# there.
#
# What the check holds you to: a number of bytes within 1e-6 relative.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here the formulas
# of `minipar.cost` and the measurements of `minipar.memory_time`); the check fails an answer that
# calls it, whatever its values.
# %%
from minipar.grading import check


# %%
def activation_bytes(s, b, h, a, t, sp, recompute):
    """Bytes per layer per micro-batch (Korthikanti et al. 2022, Table 2)."""
    # BEGIN SOLUTION
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)  # only the layer's input is kept
    scores = 0 if recompute == "selective" else 5 * a * s / h
    if sp:
        return sbh / t * (34 + scores)  # everything split over t
    return sbh * (10 + 24 / t + scores / t)  # 10sbh stays replicated without sp
    # END SOLUTION


# %% [check]
check("memory_time.activations", activation_bytes)
