"""Checkers for the "Where the memory and the time go" exercises.

Each answer is a function of the configuration, called on several configurations including a
published one, and compared with :mod:`minipar.cost`. When a wrong value equals a known slip
(no embeddings, GB instead of bytes, t multiplied instead of divided, ...) the FAIL line names it.
"""

from __future__ import annotations

from minipar.cost.chapters.memory_time import activation_bytes_per_layer, model_state_bytes
from minipar.cost.model import flops_per_iteration, param_count
from minipar.grading.limits import run_ranks

from . import GradeFailure, as_number, task


def _near(x, y, rel):
    return abs(x - y) <= rel * abs(y)


def _grade(
    candidate,
    configs,
    expected,
    slips,
    rel=1e-6,
    hint="check units (bytes, not GB) and which factors apply",
):
    """Call ``candidate(**cfg)`` per config; on a wrong value name the slip it matches."""
    if not callable(candidate):
        raise GradeFailure("pass your function itself (e.g. check(id, params)), not a number")
    for cfg in configs:
        what = ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in cfg.items()
        )
        x, want = as_number(candidate(**cfg), f"for {what}: expected a number"), expected(**cfg)
        if _near(x, want, rel):
            continue
        for reason, value in slips(**cfg).items():
            if not _near(value, want, rel) and _near(x, value, rel):
                raise GradeFailure(f"for {what}: {x:.4g} -- {reason}")
        side = "too large" if x > want else "too small"
        raise GradeFailure(f"for {what}: {x:.6g} is {side} (relative tolerance {rel:g}); {hint}")


# ---------------------------------------------------------------- 01 parameters (Eq. 2)
PARAM_CONFIGS = [
    dict(L=96, h=12288, V=51200, s=2048),  # GPT-3 175B (Narayanan Eq. 2)
    dict(L=24, h=2304, V=51200, s=2048),  # Narayanan Table 1, 1.7B
    dict(L=2, h=64, V=100, s=32),
]  # the notebook's tiny GPT


def _param_slips(L, h, V, s):
    layers = 12 * L * h**2 + 13 * L * h
    return {
        "forgot the embedding term (V + s)·h": layers,
        "forgot the position embeddings s·h": layers + V * h,
        "counted only the 12h² weight matrices per layer (add 13h biases and layer-norm "
        "parameters per layer, and (V + s)·h embeddings)": 12 * L * h**2 + (V + s) * h,
        "counted only 12Lh²: add 13h per layer and the (V + s)·h embeddings": 12 * L * h**2,
        "counted the output layer separately: it is tied to the token embedding (V·h once)": layers
        + (2 * V + s) * h,
        "the MLP is h → 4h → h: 8h² weights, 4h² in attention (you have 4h² + 4h² ?)": 8 * L * h**2
        + 13 * L * h
        + (V + s) * h,
    }


@task("memory_time.params", "Ψ = 12Lh² + 13Lh + (V + s)h on GPT-3 175B, 1.7B and a tiny model")
def check_params(candidate):
    _grade(candidate, PARAM_CONFIGS, param_count, _param_slips)


# ---------------------------------------------------------------- 02 ZeRO model states
ZERO_CONFIGS = [dict(psi=7.5e9, d=64, stage=s) for s in (0, 1, 2, 3)] + [
    dict(psi=175e9, d=1, stage=3),
    dict(psi=128e9, d=16, stage=2),
    dict(psi=1e9, d=4, stage=1),
]


def _zero_bytes(psi, d, stage):
    return model_state_bytes(psi, d=d, zero=stage).total


def _zero_slips(psi, d, stage):
    want = _zero_bytes(psi, d, stage)
    slips = {
        "returned GB (10⁹ bytes): the task asks for bytes": want / 1e9,
        "returned GiB (2³⁰ bytes): the task asks for bytes": want / 2**30,
        "divided every state by d: stage 0 shards nothing, 1 the optimizer, 2 also "
        "the gradients, 3 also the weights": 16 * psi / d,
        "did not divide the sharded states by d": 16 * psi,
        "optimizer state of 8 bytes per parameter: mixed-precision Adam also keeps fp32 "
        "master weights (K = 12)": model_state_bytes(psi, d=d, zero=stage, optimizer_bytes=8).total,
    }
    for other in range(4):
        if other != stage:
            slips[f"this is stage {other}'s memory, not stage {stage}'s"] = _zero_bytes(
                psi, d, other
            )
    return slips


@task("memory_time.zero_bytes", "per-GPU model-state bytes match ZeRO Figure 1 and Table 1")
def check_zero_bytes(candidate):
    _grade(candidate, ZERO_CONFIGS, _zero_bytes, _zero_slips)


# ---------------------------------------------------------------- 03 activations (Table 2)
_GPT3 = dict(s=2048, b=1, h=12288, a=96)
ACT_CONFIGS = [
    dict(**_GPT3, t=1, sp=False, recompute="none"),
    dict(**_GPT3, t=8, sp=False, recompute="none"),
    dict(**_GPT3, t=8, sp=True, recompute="none"),
    dict(**_GPT3, t=8, sp=True, recompute="selective"),
    dict(**_GPT3, t=8, sp=False, recompute="selective"),
    dict(**_GPT3, t=8, sp=False, recompute="full"),
    dict(**_GPT3, t=8, sp=True, recompute="full"),
    dict(s=4096, b=2, h=8192, a=64, t=4, sp=True, recompute="none"),
]


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
            sbh * t * (34 + scores) if sp else sbh * (10 + 24 * t + scores * t)
        )
        if sp:
            slips[
                "sequence parallelism also splits the 10sbh of layer-norm and dropout "
                "activations over t"
            ] = _act(s, b, h, a, t, False, recompute)
        else:
            slips["without sequence parallelism 10sbh stays replicated on every rank"] = _act(
                s, b, h, a, t, True, recompute
            )
    if recompute == "selective":
        slips["selective recomputation drops the 5as²b attention-score term"] = _act(
            s, b, h, a, t, sp, "none"
        )
    if recompute == "full" and t > 1:
        slips[
            "with sequence parallelism the 2sbh layer input is split over t too"
            if sp
            else "without sequence parallelism the 2sbh layer input is replicated, not split"
        ] = 2 * sbh if sp else 2 * sbh / t
    return slips


@task("memory_time.activations", "Korthikanti Table 2 for GPT-3 with t, sp and recomputation")
def check_activations(candidate):
    _grade(candidate, ACT_CONFIGS, _act, _act_slips)


# ---------------------------------------------------------------- 04 MFU
# Korthikanti et al. 2022 Table 5 (A100, 312 TFLOP/s bf16): 22B and 175B rows
MFU_CONFIGS = [
    dict(B=64, s=2048, L=96, h=12288, V=51200, seconds=13.75, gpus=64, peak=312e12),
    dict(B=4, s=2048, L=48, h=6144, V=51200, seconds=1.10, gpus=8, peak=312e12),
    dict(B=8, s=1024, L=2, h=64, V=100, seconds=0.05, gpus=1, peak=1e12),
]


def _mfu(B, s, L, h, V, seconds, gpus, peak):
    return flops_per_iteration(B, s, L, h, V) / (seconds * gpus * peak)


def _mfu_slips(B, s, L, h, V, seconds, gpus, peak):
    want, per = _mfu(B, s, L, h, V, seconds, gpus, peak), seconds * gpus * peak
    return {
        "return a fraction (0.514), not a percentage": 100 * want,
        "divide by the number of GPUs too: peak is per GPU": want * gpus,
        "counted only the forward pass: backward costs twice the forward (×3 in all)": want / 3,
        "counted selective recomputation's extra FLOPs: that is HFU, MFU counts model FLOPs": flops_per_iteration(
            B, s, L, h, V, "selective"
        )
        / per,
        "counted full recomputation's extra forward: that is HFU, not MFU": flops_per_iteration(
            B, s, L, h, V, "full"
        )
        / per,
        "6ND leaves out the attention s² term: use 72BsLh²(1 + s/6h + V/12hL)": 6
        * param_count(L, h, V, s)
        * B
        * s
        / per,
    }


@task("memory_time.mfu", "MFU from Eq. 7 reproduces Korthikanti Table 5 (51.4 % for 175B)")
def check_mfu(candidate):
    _grade(
        candidate,
        MFU_CONFIGS,
        _mfu,
        _mfu_slips,
        rel=1e-3,
        hint="count 72BsLh²(1 + s/6h + V/12hL) FLOPs per iteration, over seconds × gpus × peak",
    )


# ---------------------------------------------------------------- 01b parameters, measured
MEASURED_CONFIGS = [
    dict(L=2, h=32, a=4, s=16, V=50),
    dict(L=3, h=48, a=6, s=24, V=70),
    dict(L=1, h=16, a=2, s=8, V=10),
]


def _gpt_counts(L, h, a, s, V):
    """(true Ψ, Ψ summed over every module's recursive parameters: each parameter counted
    once per module that contains it)."""
    from minipar.memory_time.gpt import GPTConfig, gpt  # noqa: PLC0415 (lazy: torch)

    model = gpt(GPTConfig(L=L, h=h, a=a, s=s, V=V))
    return (
        sum(p.numel() for p in model.parameters()),
        sum(p.numel() for m in model.modules() for p in m.parameters()),
    )


@task(
    "memory_time.params_measured",
    "the parameters counted on three real tiny GPTs, and predicted exactly from Eq. 2 plus "
    "what it leaves out",
)
def check_params_measured(candidate):
    if not callable(candidate):
        raise GradeFailure("pass your function itself, e.g. check(id, measured_and_predicted)")
    for cfg in MEASURED_CONFIGS:
        what = ", ".join(f"{k}={v}" for k, v in cfg.items())
        got = candidate(**cfg)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise GradeFailure(f"for {what}: return (measured, predicted), got {got!r}")
        measured = as_number(got[0], f"for {what}: measured must be a number")
        predicted = as_number(got[1], f"for {what}: predicted must be a number")
        true, nested = _gpt_counts(**cfg)
        eq2 = param_count(cfg["L"], cfg["h"], cfg["V"], cfg["s"])
        if measured != true:
            if measured == nested:
                raise GradeFailure(
                    f"for {what}: measured {measured:.0f} counts each parameter "
                    "once per module that contains it (m.parameters() recurses "
                    "into submodules): sum over model.parameters() once"
                )
            if measured == true + cfg["V"] * cfg["h"]:
                raise GradeFailure(
                    f"for {what}: measured {measured:.0f} counts the tied "
                    "output weight (V·h) a second time"
                )
            raise GradeFailure(
                f"for {what}: measured {measured:.0f}, but the model has "
                f"{true} parameters: sum p.numel() over model.parameters()"
            )
        if predicted != true:
            if predicted == eq2:
                raise GradeFailure(
                    f"for {what}: predicted {predicted:.0f} is Eq. 2 alone, "
                    f"{true - eq2} short of the model: Eq. 2 leaves out the "
                    "final layer norm before the output layer (scale and shift, "
                    "2h)"
                )
            raise GradeFailure(
                f"for {what}: predicted {predicted:.0f}, measured {true}: "
                f"off by {predicted - true:+.0f}"
            )


# ---------------------------------------------------------------- 02b Adam state, measured
ADAM_STAGES, ADAM_RANKS = (0, 1, 2), (2, 3)
_TINY = dict(L=2, h=32, a=4, s=16, V=50)


def _reference_adam_bytes(stage: int, count_step: bool = False) -> int:
    """This rank's Adam state bytes after one ZeRO step of the tiny GPT (the course's code)."""
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    from minipar.data_parallel.zero import ZeRO  # noqa: PLC0415 (lazy: torch)
    from minipar.memory_time.gpt import GPTConfig, gpt  # noqa: PLC0415 (lazy: torch)

    torch.manual_seed(0)
    model = gpt(GPTConfig(**_TINY))
    zero = ZeRO(model, stage, lambda ps: torch.optim.Adam(ps, lr=1e-3))
    tokens = torch.randint(_TINY["V"], (2, _TINY["s"] + 1))  # (b, s + 1)
    zero.zero_grad()
    logits = model(tokens[:, :-1])  # (b, s, V)
    F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    zero.step()
    return sum(
        v.numel() * v.element_size()
        for st in zero.optimizer.state.values()
        for k, v in st.items()
        if torch.is_tensor(v) and (count_step or k != "step")
    )


def _adam_on_rank(rank, n, measure):
    out = {}
    for stage in ADAM_STAGES:
        out[stage] = dict(
            got=measure(rank, n, stage),
            ref=_reference_adam_bytes(stage),
            with_step=_reference_adam_bytes(stage, count_step=True),
        )
    return out


@task(
    "memory_time.adam_state",
    "Adam state per rank measured over gloo on 2 and 3 ranks (ZeRO stages 0–2) and predicted "
    "within 1 %",
)
def check_adam_state(candidate):
    from minipar.memory_time.gpt import GPTConfig, gpt  # noqa: PLC0415 (lazy: torch)

    if not (
        isinstance(candidate, (tuple, list))
        and len(candidate) == 2
        and all(callable(c) for c in candidate)
    ):
        raise GradeFailure(
            "pass both functions: check(id, (adam_state_bytes, predict_adam_state_bytes))"
        )
    measure, predict = candidate
    psi = sum(p.numel() for p in gpt(GPTConfig(**_TINY)).parameters())
    for n in ADAM_RANKS:
        for rank, res in enumerate(run_ranks(_adam_on_rank, n, measure)):
            for stage, r in res.items():
                where = f"stage {stage}, {n} ranks, rank {rank}"
                got = as_number(r["got"], f"{where}: adam_state_bytes must return a number")
                if got != r["ref"]:
                    if got == r["with_step"]:
                        raise GradeFailure(
                            f"{where}: measured {got:.0f} bytes includes Adam's "
                            "scalar step counter; count exp_avg and exp_avg_sq "
                            "only"
                        )
                    if got == r["ref"] / 2:
                        raise GradeFailure(
                            f"{where}: measured {got:.0f} bytes, half of the "
                            f"{r['ref']} held: Adam keeps two moments, exp_avg "
                            "and exp_avg_sq"
                        )
                    raise GradeFailure(
                        f"{where}: measured {got:.0f} bytes, but this rank's "
                        f"Adam moments take {r['ref']} bytes: build the model "
                        "given, wrap it in ZeRO with that stage, take one step, "
                        "and sum numel·element_size over zero.optimizer.state"
                    )
                _near_prediction(predict, psi, n, stage, r["ref"], "measured")
    for psi_big, d in ((7.5e9, 64), (1.3e9, 3)):  # ZeRO's 7.5B example, and n=3
        for stage in (0, 1, 2, 3):
            want = 8 * psi_big / (d if stage else 1)
            _near_prediction(predict, psi_big, d, stage, want, "ZeRO's arithmetic gives")


def _near_prediction(predict, psi, d, stage, want, source):
    what = f"predict_adam_state_bytes(psi={psi:g}, d={d}, stage={stage})"
    x = as_number(predict(psi, d, stage), f"{what}: expected a number")
    if abs(x - want) <= 0.01 * want:
        return
    slips = {
        4 * psi / (d if stage else 1): "Adam keeps two moments, not one",
        12 * psi / (d if stage else 1): "12 bytes per parameter is mixed precision's "
        "fp32 master weights + moments; this model trains in fp32: 2 moments × 4 bytes",
        16 * psi / (d if stage else 1): "16 bytes per parameter is all model states; "
        "Adam's moments are 8",
        8 * psi: "stage ≥ 1 shards the optimizer state: divide by d",
        8 * psi / d: "stage 0 shards nothing: every rank keeps all the state",
    }
    for value, reason in slips.items():
        if abs(value - want) > 0.01 * want and abs(x - value) <= 0.01 * value:
            raise GradeFailure(f"{what} = {x:.4g}, {source} {want:.4g}: {reason}")
    raise GradeFailure(f"{what} = {x:.4g}, {source} {want:.4g} (tolerance 1 %)")
