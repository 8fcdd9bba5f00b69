# %% [markdown]
# # Exercise 2: dispatch counts and splits
#
# Rank r of an expert-parallel group of `ep` ranks owns experts [r·E/ep, (r+1)·E/ep). Each rank
# holds its own tokens `x` (n, h) (n differs between ranks) and their choices `experts` (n, K).
# Write `dispatch(x, experts, num_experts, group)`, which sends every (token, choice) row to the
# rank that owns the chosen expert, and returns
#
# * `rows` (m, h): the rows this rank received, grouped by **source rank** (0, 1, ...) and, within
#   a source, by **local expert** (its first, second, ...), that is, in the order the source sent
#   them;
# * `recv_counts` (ep, E/ep) int64: `recv_counts[s, e]` rows received from rank s for local
#   expert e.
#
# The order of the assignments: number them a = j·n + i (every token's first choice, in token
# order, then every second choice), and sort them by expert with a **stable** sort, so that an
# expert's rows keep that order (the order in which a capacity would accept them, exercise 4).
#
# Steps: sort; count rows per expert (`torch.bincount`), view them as (ep, E/ep); exchange the
# counts with one `dist.all_to_all_single` so each rank learns what it will receive; then
# `dist.all_to_all_single(out, inp, output_split_sizes, input_split_sizes, group=group)` with
# uneven splits. Use `dist.get_rank(group)` and `dist.get_world_size(group)`, and pass `group=`
# to every collective: the check also runs in a subgroup.
#
# What the check holds you to: only the results, not how you got them. `rows` must equal the
# expected rows exactly (they are copies of rows of `x`, in `x`'s dtype, float64 in the check)
# and `recv_counts` must be int64 and equal. Any collective calls are fine as long as every rank of
# the group makes the same ones. With a one-rank group there is nothing to exchange: skip the
# collectives or call them (a one-rank `all_to_all_single` copies its input), either passes.
# The check routes tokens three times on every layout: at random; skewed so that the two
# highest-numbered experts receive no token (a rank may receive no row at all: return a
# (0, h) tensor and zero counts) while one expert receives more rows than an unstable sort
# keeps in order; and with no token at all on each group's rank 0 (n = 0: `x` is (0, h),
# `experts` (0, K)). A rank with n = 0 sends nothing but still receives rows, so it makes the
# same collective calls as the others. The receive buffer is in `x`'s dtype too
# (`torch.empty` without a dtype is float32). It only uses E divisible by ep; for another E raise a `ValueError` naming
# the rule (not graded).
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here
# `minipar.expert_parallel`); the check fails an answer that calls it, whatever its values.
# %%
import torch
import torch.distributed as dist

from minipar.grading import check


# %%
def dispatch(x, experts, num_experts, group=None):
    """Send each (token, choice) row to its expert's rank -> (rows (m, h), recv_counts (ep, E/ep))."""
    # BEGIN SOLUTION
    n, K = experts.shape
    ep = dist.get_world_size(group)
    if num_experts % ep:
        raise ValueError(f"num_experts ({num_experts}) must be divisible by ep ({ep})")
    token = torch.arange(n).repeat(K)  # (n·K,) a = j·n + i
    expert = experts.T.reshape(-1)  # (n·K,)
    order = torch.argsort(expert, stable=True)
    token, expert = token[order], expert[order]
    send = torch.bincount(expert, minlength=num_experts).view(ep, num_experts // ep)
    if ep == 1:
        return x[token], send
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    in_splits, out_splits = send.sum(1).tolist(), recv.sum(1).tolist()
    rows = x.new_empty(sum(out_splits), x.shape[1])
    dist.all_to_all_single(rows, x[token].contiguous(), out_splits, in_splits, group=group)
    return rows, recv
    # END SOLUTION


# %% [check]
check("expert_parallel.dispatch", dispatch)
