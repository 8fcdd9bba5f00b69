# %% [markdown]
# # Exercise 3: α-β arithmetic and bus bandwidth
#
# Units: S in bytes, α in seconds, bandwidth in bytes/s **per direction**, time in seconds.
#
# **(a)** Write `ring_all_reduce_time(n, S, alpha, bandwidth)`: the α-β time of a ring
# all-reduce of S bytes on n ranks (Thakur, Rabenseifner & Gropp 2005).
#
# What the check holds you to: numbers (int or float) within 1e-6 relative; the gradient-sync
# answer within 1e-3.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here the α-β
# model and bus bandwidths of `minipar.cost`); the check fails an answer that calls it, whatever
# its values.
# %%
from minipar.grading import check


# %%
def ring_all_reduce_time(n, S, alpha, bandwidth):
    # BEGIN SOLUTION
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * S / bandwidth
    # END SOLUTION


# %% [check]
check("collectives.alpha_beta_time", ring_all_reduce_time)


# %% [markdown]
# **(b)** nccl-tests reports, for an op that took `seconds` on n ranks with S bytes, the
# algorithm bandwidth algbw = S / seconds and the bus bandwidth busbw. Write
# `bus_bandwidth(op, n, S, seconds)` for `op` one of the strings `"all-reduce"`, `"all-gather"`,
# `"reduce-scatter"` and `"broadcast"`: nccl-tests' names, spelled with a hyphen, which are the
# only spellings the check passes (and it passes each of them).
# %%
def bus_bandwidth(op, n, S, seconds):
    # BEGIN SOLUTION
    factor = {
        "all-reduce": 2 * (n - 1) / n,
        "all-gather": (n - 1) / n,
        "reduce-scatter": (n - 1) / n,
        "broadcast": 1.0,
    }[op]
    return S / seconds * factor
    # END SOLUTION


# %% [check]
check("collectives.busbw", bus_bandwidth)


# %% [markdown]
# **(c)** A data-parallel step all-reduces the fp32 gradients of Ψ = 1.5·10⁹ parameters over
# d = 8 H100 GPUs in one NVLink 4 domain (datasheet: "900 GB/s"), with a ring, α = 2 µs.
# Fill in S in bytes, the bandwidth a ring step can use in bytes/s, and the predicted time in
# seconds.
# %%
def gradient_sync():
    # BEGIN SOLUTION
    S_bytes = 1.5e9 * 4  # fp32: 4 bytes per gradient
    bandwidth = 900e9 / 2  # 900 GB/s is both directions together
    seconds = 2 * 7 * 2e-6 + 2 * 7 / 8 * S_bytes / bandwidth
    # END SOLUTION
    return dict(S_bytes=S_bytes, bandwidth=bandwidth, seconds=seconds)


# %% [check]
check("collectives.gradient_sync", gradient_sync)
