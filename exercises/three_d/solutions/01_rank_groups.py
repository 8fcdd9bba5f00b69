# %% [markdown]
# # Exercise 1: the rank grid's groups
#
# Write `rank_groups(d, t, p)`: the process groups of a d × t × p run on N = d·t·p ranks,
# numbered as Megatron-LM numbers them, `t` innermost (consecutive ranks), then `d`, with `p`
# outermost. Return a dict with keys `"tp"`, `"dp"` and `"pp"`, each a list of groups, each
# group a list of global ranks. The check compares them as sets of sets: the order of ranks in
# a group and of groups in a list does not matter, because `dist.new_group(ranks)` sorts the
# ranks it is given (a pipeline group's stage i is still its i-th smallest rank). The check
# tries several shapes, some of them not powers of two, and names the mix-up if your groups
# follow another order.
# %%
from minipar.grading import check


# %%
def rank_groups(d, t, p):
    """{"tp": [[ranks], ...], "dp": [...], "pp": [...]} for rank = i_p·d·t + i_d·t + i_t."""

    # BEGIN SOLUTION
    def rank(i_p, i_d, i_t):
        return i_p * d * t + i_d * t + i_t

    return {
        "tp": [[rank(i, j, k) for k in range(t)] for i in range(p) for j in range(d)],
        "dp": [[rank(i, j, k) for j in range(d)] for i in range(p) for k in range(t)],
        "pp": [[rank(i, j, k) for i in range(p)] for j in range(d) for k in range(t)],
    }
    # END SOLUTION


# %% [check]
check("three_d.rank_groups", rank_groups)
