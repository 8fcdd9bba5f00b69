# %% [markdown]
# # Exercise 2: model states per GPU under ZeRO
#
# Write `zero_bytes(psi, d, stage)`: the bytes of weights, gradients and optimizer state that
# one GPU holds when a model of `psi` parameters is trained with mixed-precision Adam (2 bytes
# of bf16 weights, 2 of bf16 gradients, 12 of fp32 optimizer state per parameter) on `d`
# data-parallel GPUs with ZeRO stage `stage` (0 = plain data parallelism). Return **bytes**.
# The checker compares with ZeRO's Figure 1 (7.5B parameters, d = 64) and Table 1.
#
# What the check holds you to: a number of bytes within 1e-6 relative, and one rule. The course's
# code: an answer may call torch, the launcher and the answers of the earlier exercises it builds
# on, not the course's implementation of what the task asks (here the formulas of `minipar.cost`;
# the GPT, ZeRO and the launcher that (b) names are yours to call); the check fails an answer that
# calls it, whatever its values.
# %%
import torch
import torch.nn.functional as F

from minipar.data_parallel.zero import ZeRO
from minipar.grading import check
from minipar.model import GPTConfig, gpt
from minipar.runtime.launch import run


# %%
def zero_bytes(psi, d, stage):
    """Per-GPU model-state bytes under ZeRO-``stage`` (Rajbhandari et al. 2020, §5)."""
    # BEGIN SOLUTION
    w, g, k = 2 * psi, 2 * psi, 12 * psi
    if stage >= 1:
        k /= d  # P_os: optimizer states sharded
    if stage >= 2:
        g /= d  # P_os+g: gradients too
    if stage >= 3:
        w /= d  # P_os+g+p: and the weights
    return w + g + k
    # END SOLUTION


# %% [check]
check("memory_time.zero_bytes", zero_bytes)


# %% [markdown]
# **(b) Measure it over gloo.** Write `adam_state_bytes(rank, world_size, stage)`, which
# `minipar.runtime.launch.run` runs on every rank: build the tiny GPT
# `gpt(GPTConfig(L=2, h=32, a=4, s=16, V=50))` from `minipar.model` (call
# `torch.manual_seed(0)` first, so every rank starts equal), wrap it in
# `ZeRO(model, stage, lambda ps: torch.optim.Adam(ps, lr=1e-3))` from
# `minipar.data_parallel.zero`, take one training step (`zero.zero_grad()`, a next-token
# cross-entropy `.backward()`, `zero.step()`), and return the bytes of the Adam moments this
# rank holds (`zero.optimizer.state`: `exp_avg` and `exp_avg_sq`; leave out the scalar `step`
# counter, which is not model state).
#
# Then write `predict_adam_state_bytes(psi, d, stage)`: this model trains in fp32, so Adam keeps
# two fp32 moments per parameter; from stage 1 on each of the `d` ranks keeps only its shard.
# The checker runs your measurement on 2 and 3 ranks for stages 0, 1 and 2 and compares it
# with its own measurement of the same seeded step **exactly** (the same bytes, no tolerance:
# the scalar `step` counters left out, as above; counting them fails), and wants your prediction
# within 1 % of it (ZeRO pads Ψ up to a multiple of d).
# Try it first: `run(adam_state_bytes, 2, 1, backend="gloo")` gives one number per rank.
# %%
def adam_state_bytes(rank, world_size, stage):
    """On each rank: the bytes of Adam's moments this rank holds after one ZeRO step."""
    # BEGIN SOLUTION
    torch.manual_seed(0)
    model = gpt(GPTConfig(L=2, h=32, a=4, s=16, V=50))
    zero = ZeRO(model, stage, lambda ps: torch.optim.Adam(ps, lr=1e-3))
    tokens = torch.randint(50, (2, 17))  # (b, s + 1)
    zero.zero_grad()
    logits = model(tokens[:, :-1])  # (b, s, V)
    F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    zero.step()
    return sum(
        v.numel() * v.element_size()
        for state in zero.optimizer.state.values()
        for name, v in state.items()
        if name != "step"
    )
    # END SOLUTION


def predict_adam_state_bytes(psi, d, stage):
    """Adam moment bytes per rank for an fp32 model of ``psi`` parameters, ZeRO-``stage``."""
    # BEGIN SOLUTION
    moments = 2 * 4 * psi  # exp_avg + exp_avg_sq, fp32
    return moments / d if stage >= 1 else moments
    # END SOLUTION


# %% [check]
check("memory_time.adam_state", (adam_state_bytes, predict_adam_state_bytes))
