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
#
# What the check holds you to: the results, and one rule. The course's code: an answer may call
# torch, the launcher and the answers of the earlier exercises it builds on, not the course's
# implementation of what the task asks (here the grids of `minipar.three_d` and `minipar.grid` and
# the planner of `minipar.cost.planner`); the check fails an answer that calls it, whatever its
# values.
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
