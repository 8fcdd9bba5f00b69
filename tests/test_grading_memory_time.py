"""Memory-and-time exercises: solutions pass, starters fail, realistic slips get named."""

import pytest
from grading_support import clause_cases, clause_fails, exercise_function, failure

from minipar.grading import check

TASKS = {
    "01_params": ("memory_time.params", "params"),
    "02_zero_bytes": ("memory_time.zero_bytes", "zero_bytes"),
    "03_activations": ("memory_time.activations", "activation_bytes"),
    "04_mfu": ("memory_time.mfu", "mfu"),
}


def solution(stem):
    return exercise_function("memory_time", stem, TASKS[stem][1], solved=True)


def starter(stem):
    return exercise_function("memory_time", stem, TASKS[stem][1], solved=False)


@pytest.mark.parametrize("stem", TASKS)
def test_solution_passes_and_starter_fails(stem, capsys):
    task_id = TASKS[stem][0]
    assert check(task_id, solution(stem))
    assert not check(task_id, starter(stem))
    assert "not implemented yet" in capsys.readouterr().out.splitlines()[-1]


def _zero(psi, d, stage, k=12, unit=1, shard_all=False):
    w, g, o = 2 * psi, 2 * psi, k * psi
    if shard_all and stage:
        return (w + g + o) / d / unit
    o, g = o / (d if stage >= 1 else 1), g / (d if stage >= 2 else 1)
    w = w / (d if stage >= 3 else 1)
    return (w + g + o) / unit


def _act(
    s, b, h, a, t, sp, recompute, *, e=2, t_mul=False, sp_ignored=False, sel=True, full_sp=True
):
    sbh, tt = s * b * h, (1 / t if t_mul else t)
    sp = sp and not sp_ignored
    if recompute == "full":
        return e * sbh / (tt if sp and full_sp else 1)
    scores = 0 if recompute == "selective" and sel else 5 * a * s / h
    return e / 2 * (sbh / tt * (34 + scores) if sp else sbh * (10 + 24 / tt + scores / tt))


def _mfu(B, s, L, h, V, seconds, gpus, peak, *, fwd_only=False, percent=False, six_nd=False):
    f = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    if six_nd:
        f = 6 * (12 * L * h**2 + 13 * L * h + (V + s) * h) * B * s
    u = f / (3 if fwd_only else 1) / (seconds * gpus * peak)
    return 100 * u if percent else u


def hfu(B, s, L, h, V, seconds, gpus, peak):  # selective recomputation counted
    f = 72 * B * s * L * h**2 * (1 + s / (3 * h) + V / (12 * h * L))
    return f / (seconds * gpus * peak)


# ------------------------------------------------------------------ measured, not copied
def _measured(stem, *names, solved=True):
    from grading_support import EXERCISES

    from minipar.grading.notebooks import exercise_namespace

    ns = exercise_namespace(EXERCISES / "memory_time" / "solutions" / f"{stem}.py", solved)
    return tuple(ns[n] for n in names)


def _gpt(L, h, a, s, V):
    from minipar.memory_time.gpt import GPTConfig, gpt

    return gpt(GPTConfig(L=L, h=h, a=a, s=s, V=V))


def test_params_measured_solution_and_starter(capsys):
    (good,) = _measured("01_params", "measured_and_predicted")
    (start,) = _measured("01_params", "measured_and_predicted", solved=False)
    task = "memory_time.params_measured"
    assert check(task, good)
    assert "not implemented yet" in failure(task, start, capsys)


@pytest.mark.slow
def test_adam_state_measured_over_gloo(capsys):
    measure, predict = _measured("02_zero_bytes", "adam_state_bytes", "predict_adam_state_bytes")
    start = _measured("02_zero_bytes", "adam_state_bytes", "predict_adam_state_bytes", solved=False)
    task = "memory_time.adam_state"
    assert check(task, (measure, predict))
    assert "not implemented yet" in failure(task, start, capsys)


def with_step(rank, world_size, stage):
    from minipar.grading.memory_time import _reference_adam_bytes

    return _reference_adam_bytes(stage, count_step=True)


def one_moment(rank, world_size, stage):
    from minipar.grading.memory_time import _reference_adam_bytes

    return _reference_adam_bytes(stage) // 2


def rounded_to_kib(rank, world_size, stage):
    from minipar.grading.memory_time import _reference_adam_bytes

    return round(_reference_adam_bytes(stage) / 1024) * 1024  # "close enough" is not exact


def _right_measure():
    return _measured("02_zero_bytes", "adam_state_bytes")[0]


def _right_predict():
    return _measured("02_zero_bytes", "predict_adam_state_bytes")[0]


_count = lambda m: sum(p.numel() for p in m.parameters())
_nested = lambda m: sum(p.numel() for mod in m.modules() for p in mod.parameters())
_psi = lambda L, h, V, s: 12 * L * h**2 + 13 * L * h + (V + s) * h

# ------------------------------------------------------------------ the clause table's wrong answers
WRONG = {
    # 01 params
    "params_no_embedding": lambda L, h, V, s: 12 * L * h**2 + 13 * L * h,
    "params_no_positions": lambda L, h, V, s: 12 * L * h**2 + 13 * L * h + V * h,
    "params_untied": lambda L, h, V, s: 12 * L * h**2 + 13 * L * h + (2 * V + s) * h,
    "params_layers_only": lambda L, h, V, s: 12 * L * h**2,
    "params_hard_coded": lambda L, h, V, s: 1.7e9,
    "params_as_text": lambda L, h, V, s: f"{_psi(L, h, V, s):.4g}",
    "params_in_a_list": lambda L, h, V, s: [_psi(L, h, V, s)],
    # 02 ZeRO bytes
    "zero_in_gb": lambda psi, d, stage: _zero(psi, d, stage, unit=1e9),
    "zero_in_gib": lambda psi, d, stage: _zero(psi, d, stage, unit=2**30),
    "zero_unsharded": lambda psi, d, stage: 16 * psi,
    "zero_shards_everything": lambda psi, d, stage: _zero(psi, d, stage, shard_all=True),
    "zero_no_master_weights": lambda psi, d, stage: _zero(psi, d, stage, k=8),
    "zero_stage_off_by_one": lambda psi, d, stage: _zero(psi, d, min(stage + 1, 3)),
    "zero_hard_coded": lambda psi, d, stage: 1.5e10,
    # 03 activations
    "activations_4_bytes": lambda *a, **k: _act(*a, **k, e=4),
    "activations_times_t": lambda *a, **k: _act(*a, **k, t_mul=True),
    "activations_sp_ignored": lambda *a, **k: _act(*a, **k, sp_ignored=True),
    "activations_selective_ignored": lambda *a, **k: _act(*a, **k, sel=False),
    "activations_full_sp_replicated": lambda *a, **k: _act(*a, **k, full_sp=False),
    # 04 MFU
    "mfu_forward_only": lambda *a, **k: _mfu(*a, **k, fwd_only=True),
    "mfu_percent": lambda *a, **k: _mfu(*a, **k, percent=True),
    "mfu_six_nd": lambda *a, **k: _mfu(*a, **k, six_nd=True),
    "mfu_is_hfu": hfu,
    "mfu_a_number": 0.514,
    # 01 measured
    "measured_nested": lambda L, h, a, s, V: (_nested(_gpt(L, h, a, s, V)), 0),
    "measured_untied": lambda L, h, a, s, V: (_count(_gpt(L, h, a, s, V)) + V * h, 0),
    "measured_eq2_only": lambda L, h, a, s, V: (_count(_gpt(L, h, a, s, V)), _psi(L, h, V, s)),
    "measured_one_number": lambda L, h, a, s, V: 27584,
}


def _adam(measure=None, predict=None):
    """(measure, predict), built when graded: the solution's functions load lazily."""
    return lambda: (measure or _right_measure(), predict or _right_predict())


LAZY_WRONG = {
    "adam_with_step": _adam(measure=with_step),
    "adam_one_moment": _adam(measure=one_moment),
    "adam_measure_rounded": _adam(measure=rounded_to_kib),
    "adam_predict_fp32": _adam(predict=lambda psi, d, stage: 12 * psi / (d if stage else 1)),
    "adam_predict_no_d": _adam(predict=lambda psi, d, stage: 8 * psi),
    "adam_predict_stage0_sharded": _adam(predict=lambda psi, d, stage: 8 * psi / d),
    "adam_predict_only": lambda: _right_predict(),
}


@pytest.mark.parametrize(
    "task_id, clause", clause_cases("memory_time", slow=lambda t: t == "memory_time.adam_state")
)
def test_every_clause_has_a_wrong_answer_that_fails_with_its_reason(task_id, clause, capsys):
    wrong = WRONG if clause.wrong in WRONG else {clause.wrong: LAZY_WRONG[clause.wrong]()}
    clause_fails(task_id, clause, wrong, capsys)
