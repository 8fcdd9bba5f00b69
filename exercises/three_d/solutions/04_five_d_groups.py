# %% [markdown]
# # Exercise 4: the context- and expert-parallel groups of the five-dimensional grid
#
# N = t·cp·d·p ranks in Megatron's order, innermost first: tp → cp → dp → pp, so
# rank = i_p·(d·cp·t) + i_d·(cp·t) + i_c·t + i_t. The experts are *folded*: the S = t·cp·d ranks
# of one pipeline stage are cut again into ep × edp, ep innermost, so expert rank
# = i_p·S + i_edp·ep + i_ep, and ep need only divide S, not d.
#
# Write `five_d_groups(d, t, p, cp, ep)` returning a dict with four lists of groups, each group a
# list of global ranks:
#
# * `"cp"`: the ranks that share (i_p, i_d, i_t): one sequence's shards;
# * `"dp_cp"`: the ranks that share (i_p, i_t): where a dense weight's gradient is summed;
# * `"ep"`: the ep ranks that split one MoE layer's experts;
# * `"edp"`: the ranks of a stage that hold the same experts (the same i_ep): where an expert's
#   gradient is summed.
#
# The check compares each list of groups as a set of sets: neither the order of the ranks inside
# a group nor the order of the groups matters, because `dist.new_group(ranks)` sorts the ranks it
# is given (a member's rank in the group is its place among the group's global ranks, in
# whatever order you listed them). Increasing order is only the convention used here. Lists or
# tuples are both fine, for the groups and for the lists of groups (`new_group` takes any
# sequence of ranks); the values must be integers.
#
# If ep does not divide t·cp·d, the experts cannot be folded: raise a `ValueError` that names
# the rule, e.g. "ep (4) must divide t·cp·d (6)"; the check calls your function with such a
# shape (only the exception's type is checked). That is the only rule: ep need not divide d
# (nor t, nor cp), and a `ValueError` for a shape where ep divides t·cp·d fails the check. The check tries several shapes, some not powers
# of two, one with p, d and cp all above one, some where ep does not divide d, and names the
# slip when your groups follow a known wrong rule.
#
# What the check holds you to: the results, and one rule. The course's code: an answer may call
# torch, the launcher and the answers of the earlier exercises it builds on, not the course's
# implementation of what the task asks (here the grids of `minipar.grid` and `minipar.three_d` and
# the planner of `minipar.cost.planner`); the check fails an answer that calls it, whatever its
# values.
# %%
from minipar.grading import check


# %%
def five_d_groups(d, t, p, cp, ep):
    """{"cp": [[ranks], ...], "dp_cp": [...], "ep": [...], "edp": [...]}."""
    # BEGIN SOLUTION
    S = t * cp * d  # ranks of one pipeline stage
    if S % ep:
        raise ValueError(f"ep ({ep}) must divide t·cp·d ({S})")

    def rank(i_p, i_d, i_c, i_t):
        return i_p * S + i_d * cp * t + i_c * t + i_t

    return {
        "cp": [
            [rank(i, j, k, l) for k in range(cp)]
            for i in range(p)
            for j in range(d)
            for l in range(t)
        ],
        "dp_cp": [
            sorted(rank(i, j, k, l) for j in range(d) for k in range(cp))
            for i in range(p)
            for l in range(t)
        ],
        "ep": [[i * S + e * ep + x for x in range(ep)] for i in range(p) for e in range(S // ep)],
        "edp": [[i * S + e * ep + x for e in range(S // ep)] for i in range(p) for x in range(ep)],
    }
    # END SOLUTION


# %% [check]
check("three_d.five_d_groups", five_d_groups)
