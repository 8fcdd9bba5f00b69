# %% [markdown]
# # Exercise 2: choose (t, p, d)
#
# GPT-3 175B (L = 96, h = 12288, a = 96, s = 2048, V = 51200) is to be trained on 1024 A100-80GB
# GPUs, 8 per node (NVLink 3: 300 GB/s per direction; one 25 GB/s InfiniBand NIC per GPU), with
# 1536 sequences per step. Write `choose_layout()` returning `(t, p, d)`.
#
# The check accepts a layout that satisfies the divisibility rules, fits in memory for some
# micro-batch, recomputation and ZeRO choice, and whose predicted step time is within 10 % of
# the best layout `minipar plan` finds. Reason it out first (t up to the GPUs per node, p
# enough to fit, d the rest; the bubble is (p − 1)/m with m = B/(d·b)), then check it with
# `minipar plan --model gpt3-175b --gpus 1024 --global-batch 1536 --intra-bandwidth 300e9
# --inter-bandwidth 25e9 --tp T --pp P`.
# %%
from minipar.grading import check


# %%
def choose_layout():
    """(t, p, d) for GPT-3 175B on 1024 A100, B = 1536."""
    # BEGIN SOLUTION
    return (8, 8, 16)
    # END SOLUTION


# %% [check]
check("three_d.choose_layout", choose_layout)
