# %% [markdown]
# # Exercise 4: model FLOPs utilisation
#
# Write `mfu(B, s, L, h, V, seconds, gpus, peak)`: the fraction of the GPUs' peak that a
# training iteration on `B` sequences of length `s` achieves when it takes `seconds` on `gpus`
# GPUs of `peak` FLOP/s each. Count model FLOPs (forward and backward, no recomputation) as
# Korthikanti et al. 2022 Eq. 7 does. Return a fraction. The checker reproduces the paper's
# Table 5 (175B: 13.75 s per iteration on 64 A100s, MFU 51.4 %).
#
# What the check holds you to: a fraction (0.514, not 51.4) within 1e-3 relative.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here the FLOP
# counts of `minipar.cost`); the check fails an answer that calls it, whatever its values.
# %%
from minipar.grading import check


# %%
def mfu(B, s, L, h, V, seconds, gpus, peak):
    """Model FLOPs per second over the peak of all ``gpus`` (a fraction)."""
    # BEGIN SOLUTION
    flops = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    return flops / (seconds * gpus * peak)
    # END SOLUTION


# %% [check]
check("memory_time.mfu", mfu)
