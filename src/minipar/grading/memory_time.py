"""Checkers for the "Where the memory and the time go" exercises.

Each answer is a function of the configuration, called on several configurations including a
published one, and compared with :mod:`minipar.cost`. When a wrong value equals a known slip
(no embeddings, GB instead of bytes, t multiplied instead of divided, ...) the FAIL line names it.
The measured Adam state runs on the ranks of ``[layouts.adam]`` (2 and 3).
"""

from __future__ import annotations

from minipar.cost.chapters.memory_time import activation_bytes_per_layer, model_state_bytes
from minipar.cost.model import flops_per_iteration, param_count

from . import GradeFailure, as_number
from .declare import Chapter
from .imports import grader_code

CH = Chapter("memory_time")  # its tasks' PASS lines and named mistakes: clauses/memory_time.toml


def _near(x, y, rel):
    return abs(x - y) <= rel * abs(y)


def _grade(candidate, configs, expected, slips, rel=1e-6, hint="units hint"):
    """Call ``candidate(**cfg)`` per config; on a wrong value name the slip it matches
    (``slips(**cfg)``: {name of a ``[reasons]`` template, filled from cfg: the value it gives})."""
    if not callable(candidate):
        raise GradeFailure("pass your function itself (e.g. check(id, params)), not a number")
    for cfg in configs:
        what = ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in cfg.items()
        )
        got = CH.call(candidate, **cfg)
        x, want = as_number(got, f"for {what}: expected a number"), expected(**cfg)
        if _near(x, want, rel):
            continue
        for name, value in slips(**cfg).items():
            if not _near(value, want, rel) and _near(x, value, rel):
                raise GradeFailure(f"for {what}: {x:.4g} -- {CH.why(name, **cfg)}")
        side = "too large" if x > want else "too small"
        raise CH.fail("too far", f"for {what}", x=x, side=side, rel=rel, hint=CH.why(hint))


# ---------------------------------------------------------------- 01 parameters (Eq. 2)
PARAM_CONFIGS = CH.data["configs"]["params"]  # each task's inputs: [configs] of its clause table


def _param_slips(L, h, V, s):
    layers = 12 * L * h**2 + 13 * L * h
    return {
        "no embeddings": layers,
        "no position embeddings": layers + V * h,
        "only weight matrices and embeddings": 12 * L * h**2 + (V + s) * h,
        "only 12Lh²": 12 * L * h**2,
        "output layer counted": layers + (2 * V + s) * h,
        "MLP of 4h²": 8 * L * h**2 + 13 * L * h + (V + s) * h,
    }


@CH.task("params")
def check_params(candidate):
    _grade(candidate, PARAM_CONFIGS, param_count, _param_slips)


# ---------------------------------------------------------------- 02 ZeRO model states
ZERO_CONFIGS = CH.data["configs"]["zero_bytes"]


def _zero_bytes(psi, d, stage):
    return model_state_bytes(psi, d=d, zero=stage).total


def _zero_slips(psi, d, stage):
    want = _zero_bytes(psi, d, stage)
    slips = {
        "states in GB": want / 1e9,
        "states in GiB": want / 2**30,
        "every state divided by d": 16 * psi / d,
        "not divided by d": 16 * psi,
        "optimizer state of 8 bytes": model_state_bytes(
            psi, d=d, zero=stage, optimizer_bytes=8
        ).total,
    }
    for other in range(4):
        if other != stage:
            slips[f"stage {other}'s memory"] = _zero_bytes(psi, d, other)
    return slips


@CH.task("zero_bytes")
def check_zero_bytes(candidate):
    _grade(candidate, ZERO_CONFIGS, _zero_bytes, _zero_slips)


# ---------------------------------------------------------------- 03 activations (Table 2)
ACT_CONFIGS = CH.data["configs"]["activations"]


def _act(s, b, h, a, t, sp, recompute):
    return activation_bytes_per_layer(s, b, h, a, t=t, sp=sp, recompute=recompute)


def _act_slips(s, b, h, a, t, sp, recompute):
    want, sbh = _act(s, b, h, a, t, sp, recompute), s * b * h
    scores = 0 if recompute == "selective" else 5 * a * s / h
    slips = {
        "4-byte activations": 2 * want,
        "elements": want / 2,
        "activations in GB": want / 1e9,
        "activations in GiB": want / 2**30,
    }
    if t > 1 and recompute != "full":
        slips["multiplied by t"] = (
            sbh * t * (34 + scores) if sp else sbh * (10 + 24 * t + scores * t)
        )
        if sp:
            slips["sp splits 10sbh"] = _act(s, b, h, a, t, False, recompute)
        else:
            slips["no sp replicates 10sbh"] = _act(s, b, h, a, t, True, recompute)
    if recompute == "selective":
        slips["selective drops the scores"] = _act(s, b, h, a, t, sp, "none")
    if recompute == "full" and t > 1:
        if sp:
            slips["sp splits the input"] = 2 * sbh
        else:
            slips["no sp replicates the input"] = 2 * sbh / t
    return slips


@CH.task("activations")
def check_activations(candidate):
    _grade(candidate, ACT_CONFIGS, _act, _act_slips)


# ---------------------------------------------------------------- 04 MFU
MFU_CONFIGS = CH.data["configs"]["mfu"]  # Korthikanti et al. 2022 Table 5


def _mfu(B, s, L, h, V, seconds, gpus, peak):
    return flops_per_iteration(B, s, L, h, V) / (seconds * gpus * peak)


def _mfu_slips(B, s, L, h, V, seconds, gpus, peak):
    want, per = _mfu(B, s, L, h, V, seconds, gpus, peak), seconds * gpus * peak
    return {
        "a percentage": 100 * want,
        "peak of all GPUs": want * gpus,
        "forward only": want / 3,
        "selective recomputation counted": flops_per_iteration(B, s, L, h, V, "selective") / per,
        "full recomputation counted": flops_per_iteration(B, s, L, h, V, "full") / per,
        "6ND": 6 * param_count(L, h, V, s) * B * s / per,
    }


@CH.task("mfu")
def check_mfu(candidate):
    _grade(candidate, MFU_CONFIGS, _mfu, _mfu_slips, rel=1e-3, hint="MFU hint")


# ---------------------------------------------------------------- 01b parameters, measured
MEASURED_CONFIGS = CH.data["configs"]["params_measured"]


def _gpt_counts(L, h, a, s, V):
    """(true Ψ, Ψ summed over every module's recursive parameters: each parameter counted
    once per module that contains it)."""
    from minipar.memory_time.gpt import GPTConfig, gpt  # noqa: PLC0415 (lazy: torch)

    model = gpt(GPTConfig(L=L, h=h, a=a, s=s, V=V))
    return (
        sum(p.numel() for p in model.parameters()),
        sum(p.numel() for m in model.modules() for p in m.parameters()),
    )


@CH.task("params_measured")
def check_params_measured(candidate):
    if not callable(candidate):
        raise GradeFailure("pass your function itself, e.g. check(id, measured_and_predicted)")
    for cfg in MEASURED_CONFIGS:
        what = ", ".join(f"{k}={v}" for k, v in cfg.items())
        got = CH.call(candidate, **cfg)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise GradeFailure(f"for {what}: return (measured, predicted), got {got!r}")
        measured = as_number(got[0], f"for {what}: measured must be a number")
        predicted = as_number(got[1], f"for {what}: predicted must be a number")
        true, nested = _gpt_counts(**cfg)
        eq2 = param_count(cfg["L"], cfg["h"], cfg["V"], cfg["s"])
        if measured != true:
            if measured == nested:
                raise CH.fail("counted per module", what=what, measured=measured)
            if measured == true + cfg["V"] * cfg["h"]:
                raise CH.fail("tied weight counted twice", what=what, measured=measured)
            raise CH.fail("measured differs", what=what, measured=measured, true=true)
        if predicted != true:
            if predicted == eq2:
                raise CH.fail("Eq. 2 alone", what=what, predicted=predicted, short=true - eq2)
            raise CH.fail(
                "predicted differs", what=what, predicted=predicted, true=true, off=predicted - true
            )


# ---------------------------------------------------------------- 02b Adam state, measured
ADAM_STAGES = (0, 1, 2)
_ZERO = ("check_zero_stage",)  # ZeRO, which the measuring answer runs, validates its stage
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


def _adam_body(rank, n, group, measure):
    out = {}
    for stage in ADAM_STAGES:
        got = measure(rank, n, stage)
        with grader_code():  # the course's ZeRO, run by the grader: not the answer's call
            ref = _reference_adam_bytes(stage)
            with_step = _reference_adam_bytes(stage, count_step=True)
        out[stage] = dict(got=got, ref=ref, with_step=with_step)
    return {"stages": out}


ADAM = CH.layouts("adam", allow=_ZERO)  # the whole world of 2, then of 3 ranks


@CH.task("adam_state", allow=_ZERO)
def check_adam_state(candidate):
    from minipar.memory_time.gpt import GPTConfig, gpt  # noqa: PLC0415 (lazy: torch)

    pair = isinstance(candidate, (tuple, list)) and len(candidate) == 2
    if not (pair and all(callable(c) for c in candidate)):
        raise CH.fail("pass both functions")
    measure, predict = candidate
    psi = sum(p.numel() for p in gpt(GPTConfig(**_TINY)).parameters())
    for c in ADAM.launch(_adam_body, measure):
        rank, n = c["rank"], c["world"]
        for stage, r in c["stages"].items():
            where = f"stage {stage}, {n} ranks, rank {rank}"
            got = as_number(r["got"], f"{where}: adam_state_bytes must return a number")
            if got != r["ref"]:
                if got == r["with_step"]:
                    raise CH.fail("step counter counted", where, got=got)
                if got == r["ref"] / 2:
                    raise CH.fail("one moment", where, got=got, ref=r["ref"])
                raise CH.fail("Adam state differs", where, got=got, ref=r["ref"])
            _near_prediction(predict, psi, n, stage, r["ref"], "measured")
    for psi_big, d in ((7.5e9, 64), (1.3e9, 3)):  # ZeRO's 7.5B example, and n=3
        for stage in (0, 1, 2, 3):
            want = 8 * psi_big / (d if stage else 1)
            _near_prediction(predict, psi_big, d, stage, want, "ZeRO's arithmetic gives")


def _near_prediction(predict, psi, d, stage, want, source):
    what = f"predict_adam_state_bytes(psi={psi:g}, d={d}, stage={stage})"
    x = as_number(CH.call(predict, psi, d, stage), f"{what}: expected a number")
    if abs(x - want) <= 0.01 * want:
        return
    slips = {
        4 * psi / (d if stage else 1): "Adam keeps two moments, not one",
        12 * psi / (d if stage else 1): CH.why("12 bytes per parameter"),
        16 * psi / (d if stage else 1): CH.why("16 bytes per parameter"),
        8 * psi: "stage ≥ 1 shards the optimizer state: divide by d",
        8 * psi / d: CH.why("stage 0 shards nothing"),
    }
    for value, reason in slips.items():
        if abs(value - want) > 0.01 * want and abs(x - value) <= 0.01 * value:
            raise GradeFailure(f"{what} = {x:.4g}, {source} {want:.4g}: {reason}")
    raise GradeFailure(f"{what} = {x:.4g}, {source} {want:.4g} (tolerance 1 %)")
