"""Checkers for the "Where the memory and the time go" exercises.

Each answer is a function of the configuration, called on several configurations including a
published one, and compared with :mod:`minipar.cost`. When a wrong value equals a known slip
(no embeddings, GB instead of bytes, t multiplied instead of divided, ...) the FAIL line names it.
"""
from __future__ import annotations

from minipar.cost.memory import activation_bytes_per_layer, model_state_bytes
from minipar.cost.model import flops_per_iteration, param_count

from . import GradeFailure, as_number, task


def _near(x, y, rel):
    return abs(x - y) <= rel * abs(y)


def _grade(candidate, configs, expected, slips, rel=1e-6,
           hint="check units (bytes, not GB) and which factors apply"):
    """Call ``candidate(**cfg)`` per config; on a wrong value name the slip it matches."""
    if not callable(candidate):
        raise GradeFailure("pass your function itself (e.g. check(id, params)), not a number")
    for cfg in configs:
        what = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in cfg.items())
        x, want = as_number(candidate(**cfg), f"for {what}: expected a number"), expected(**cfg)
        if _near(x, want, rel):
            continue
        for reason, value in slips(**cfg).items():
            if not _near(value, want, rel) and _near(x, value, rel):
                raise GradeFailure(f"for {what}: {x:.4g} -- {reason}")
        side = "too large" if x > want else "too small"
        raise GradeFailure(f"for {what}: {x:.6g} is {side} (relative tolerance {rel:g}); {hint}")


# ---------------------------------------------------------------- 01 parameters (Eq. 2)
PARAM_CONFIGS = [dict(L=96, h=12288, V=51200, s=2048),      # GPT-3 175B (Narayanan Eq. 2)
                 dict(L=24, h=2304, V=51200, s=2048),       # Narayanan Table 1, 1.7B
                 dict(L=2, h=64, V=100, s=32)]              # the notebook's tiny GPT


def _param_slips(L, h, V, s):
    layers = 12 * L * h**2 + 13 * L * h
    return {
        "forgot the embedding term (V + s)·h": layers,
        "forgot the position embeddings s·h": layers + V * h,
        "counted only the 12h² weight matrices per layer (add 13h biases and layer-norm "
        "parameters per layer, and (V + s)·h embeddings)": 12 * L * h**2 + (V + s) * h,
        "counted only 12Lh²: add 13h per layer and the (V + s)·h embeddings": 12 * L * h**2,
        "counted the output layer separately: it is tied to the token embedding (V·h once)":
            layers + (2 * V + s) * h,
        "the MLP is h → 4h → h: 8h² weights, 4h² in attention (you have 4h² + 4h² ?)":
            8 * L * h**2 + 13 * L * h + (V + s) * h,
    }


@task("memory_time.params", "Ψ = 12Lh² + 13Lh + (V + s)h on GPT-3 175B, 1.7B and a tiny model")
def check_params(candidate):
    _grade(candidate, PARAM_CONFIGS, param_count, _param_slips)


# ---------------------------------------------------------------- 02 ZeRO model states
ZERO_CONFIGS = [dict(psi=7.5e9, d=64, stage=s) for s in (0, 1, 2, 3)] + [
    dict(psi=175e9, d=1, stage=3), dict(psi=128e9, d=16, stage=2), dict(psi=1e9, d=4, stage=1)]


def _zero_bytes(psi, d, stage):
    return model_state_bytes(psi, d=d, zero=stage).total


def _zero_slips(psi, d, stage):
    want = _zero_bytes(psi, d, stage)
    slips = {"returned GB (10⁹ bytes): the task asks for bytes": want / 1e9,
             "returned GiB (2³⁰ bytes): the task asks for bytes": want / 2**30,
             "divided every state by d: stage 0 shards nothing, 1 the optimizer, 2 also "
             "the gradients, 3 also the weights": 16 * psi / d,
             "did not divide the sharded states by d": 16 * psi,
             "optimizer state of 8 bytes per parameter: mixed-precision Adam also keeps fp32 "
             "master weights (K = 12)": model_state_bytes(psi, d=d, zero=stage,
                                                          optimizer_bytes=8).total}
    for other in range(4):
        if other != stage:
            slips[f"this is stage {other}'s memory, not stage {stage}'s"] = _zero_bytes(
                psi, d, other)
    return slips


@task("memory_time.zero_bytes", "per-GPU model-state bytes match ZeRO Figure 1 and Table 1")
def check_zero_bytes(candidate):
    _grade(candidate, ZERO_CONFIGS, _zero_bytes, _zero_slips)


# ---------------------------------------------------------------- 03 activations (Table 2)
_GPT3 = dict(s=2048, b=1, h=12288, a=96)
ACT_CONFIGS = [dict(**_GPT3, t=1, sp=False, recompute="none"),
               dict(**_GPT3, t=8, sp=False, recompute="none"),
               dict(**_GPT3, t=8, sp=True, recompute="none"),
               dict(**_GPT3, t=8, sp=True, recompute="selective"),
               dict(**_GPT3, t=8, sp=False, recompute="selective"),
               dict(**_GPT3, t=8, sp=False, recompute="full"),
               dict(**_GPT3, t=8, sp=True, recompute="full"),
               dict(s=4096, b=2, h=8192, a=64, t=4, sp=True, recompute="none")]


def _act(s, b, h, a, t, sp, recompute):
    return activation_bytes_per_layer(s, b, h, a, t=t, sp=sp, recompute=recompute)


def _act_slips(s, b, h, a, t, sp, recompute):
    want, sbh = _act(s, b, h, a, t, sp, recompute), s * b * h
    scores = 0 if recompute == "selective" else 5 * a * s / h
    slips = {
        "counted 4-byte activations: Table 2 assumes 16-bit (2-byte) activations": 2 * want,
        "returned elements, not bytes (activations are 2 bytes each)": want / 2,
        "returned GB: the task asks for bytes": want / 1e9,
        "returned GiB: the task asks for bytes": want / 2**30,
    }
    if t > 1 and recompute != "full":
        slips["multiplied by t where the formula divides by t"] = (
            sbh * t * (34 + scores) if sp else sbh * (10 + 24 * t + scores * t))
        if sp:
            slips["sequence parallelism also splits the 10sbh of layer-norm and dropout "
                  "activations over t"] = _act(s, b, h, a, t, False, recompute)
        else:
            slips["without sequence parallelism 10sbh stays replicated on every rank"] = \
                _act(s, b, h, a, t, True, recompute)
    if recompute == "selective":
        slips["selective recomputation drops the 5as²b attention-score term"] = \
            _act(s, b, h, a, t, sp, "none")
    if recompute == "full" and t > 1:
        slips["with sequence parallelism the 2sbh layer input is split over t too" if sp else
              "without sequence parallelism the 2sbh layer input is replicated, not split"] = \
            2 * sbh if sp else 2 * sbh / t
    return slips


@task("memory_time.activations", "Korthikanti Table 2 for GPT-3 with t, sp and recomputation")
def check_activations(candidate):
    _grade(candidate, ACT_CONFIGS, _act, _act_slips)


# ---------------------------------------------------------------- 04 MFU
# Korthikanti et al. 2022 Table 5 (A100, 312 TFLOP/s bf16): 22B and 175B rows
MFU_CONFIGS = [dict(B=64, s=2048, L=96, h=12288, V=51200, seconds=13.75, gpus=64, peak=312e12),
               dict(B=4, s=2048, L=48, h=6144, V=51200, seconds=1.10, gpus=8, peak=312e12),
               dict(B=8, s=1024, L=2, h=64, V=100, seconds=0.05, gpus=1, peak=1e12)]


def _mfu(B, s, L, h, V, seconds, gpus, peak):
    return flops_per_iteration(B, s, L, h, V) / (seconds * gpus * peak)


def _mfu_slips(B, s, L, h, V, seconds, gpus, peak):
    want, per = _mfu(B, s, L, h, V, seconds, gpus, peak), seconds * gpus * peak
    return {
        "return a fraction (0.514), not a percentage": 100 * want,
        "divide by the number of GPUs too: peak is per GPU": want * gpus,
        "counted only the forward pass: backward costs twice the forward (×3 in all)": want / 3,
        "counted selective recomputation's extra FLOPs: that is HFU, MFU counts model FLOPs":
            flops_per_iteration(B, s, L, h, V, "selective") / per,
        "counted full recomputation's extra forward: that is HFU, not MFU":
            flops_per_iteration(B, s, L, h, V, "full") / per,
        "6ND leaves out the attention s² term: use 72BsLh²(1 + s/6h + V/12hL)":
            6 * param_count(L, h, V, s) * B * s / per,
    }


@task("memory_time.mfu", "MFU from Eq. 7 reproduces Korthikanti Table 5 (51.4 % for 175B)")
def check_mfu(candidate):
    _grade(candidate, MFU_CONFIGS, _mfu, _mfu_slips, rel=1e-3,
           hint="count 72BsLh²(1 + s/6h + V/12hL) FLOPs per iteration, "
                "over seconds × gpus × peak")
