# %% [markdown]
# # Exercise 1: how many parameters?
#
# Write `params(L, h, V, s)`: the parameter count Ψ of a GPT with `L` layers, hidden size `h`,
# vocabulary `V` and `s` position embeddings, as Narayanan et al. 2021 count it (Eq. 2): per
# layer, the weight matrices of attention (QKV and output projection) and of the h → 4h → h MLP,
# their biases, and the two layer norms' scale and shift; plus token and position embeddings.
# The output layer reuses the token embedding. The checker tries GPT-3 175B, the 1.7B model of
# the paper's Table 1 and the notebook's tiny GPT.
#
# What the check holds you to: a number (an int, a float or a one-element tensor) within 1e-6
# relative.
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here the formulas
# of `minipar.cost`; the GPT of `minipar.model` you measure is yours to call); the check fails an
# answer that calls it, whatever its values.
# %%
from minipar.grading import check


# %%
def params(L, h, V, s):
    """Ψ of a GPT (Narayanan et al. 2021, Eq. 2); an exact integer."""
    # BEGIN SOLUTION
    per_layer = 12 * h * h + 13 * h  # 4h² attention + 8h² MLP; 9h biases + 4h layer norm
    return L * per_layer + (V + s) * h  # token and position embeddings (output layer tied)
    # END SOLUTION


# %% [check]
check("memory_time.params", params)

# %% [markdown]
# **(b) Measure it.** A formula is only as good as its match with a real model. Write
# `measured_and_predicted(L, h, a, s, V)`: build the course's GPT,
# `gpt(GPTConfig(L=L, h=h, a=a, s=s, V=V))` from `minipar.model`, **count** its parameters
# (a tied weight is one parameter, however many modules use it), and **predict** the same
# number from your `params` plus what Eq. 2 leaves out of this model (look at the model's last
# layers). Return `(measured, predicted)`; the checker wants both exact, on three tiny models.
# Print them for one model first and see whether they agree.
# %%
from minipar.model import GPTConfig, gpt


def measured_and_predicted(L, h, a, s, V):
    # BEGIN SOLUTION
    model = gpt(GPTConfig(L=L, h=h, a=a, s=s, V=V))
    measured = sum(p.numel() for p in model.parameters())  # parameters() lists a tied one once
    predicted = params(L, h, V, s) + 2 * h  # + the final layer norm's scale, shift
    # END SOLUTION
    return measured, predicted


# %% [check]
check("memory_time.params_measured", measured_and_predicted)
