"""Memory-and-time exercises: solutions pass, starters fail, realistic slips get named."""

import pytest
from grading_support import exercise_function, failure

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


@pytest.mark.parametrize(
    "fn, reason",
    [
        (lambda L, h, V, s: 12 * L * h**2 + 13 * L * h, "forgot the embedding term"),
        (lambda L, h, V, s: 12 * L * h**2 + 13 * L * h + V * h, "forgot the position embeddings"),
        (lambda L, h, V, s: 12 * L * h**2 + 13 * L * h + (2 * V + s) * h, "tied"),
        (lambda L, h, V, s: 12 * L * h**2, "counted only 12Lh²"),
        (lambda L, h, V, s: 1.7e9, "too"),  # a hard-coded number
        (
            lambda L, h, V, s: f"{12 * L * h**2 + 13 * L * h + (V + s) * h:.4g}",  # right, as text
            "expected a number, got str",
        ),
        (
            lambda L, h, V, s: [12 * L * h**2 + 13 * L * h + (V + s) * h],
            "expected a number, got list",
        ),
    ],
)
def test_params_slips(fn, reason, capsys):
    assert reason in failure("memory_time.params", fn, capsys)


def _zero(psi, d, stage, k=12, unit=1, shard_all=False):
    w, g, o = 2 * psi, 2 * psi, k * psi
    if shard_all and stage:
        return (w + g + o) / d / unit
    o, g = o / (d if stage >= 1 else 1), g / (d if stage >= 2 else 1)
    w = w / (d if stage >= 3 else 1)
    return (w + g + o) / unit


@pytest.mark.parametrize(
    "fn, reason",
    [
        (lambda psi, d, stage: _zero(psi, d, stage, unit=1e9), "returned GB"),
        (lambda psi, d, stage: _zero(psi, d, stage, unit=2**30), "returned GiB"),
        (lambda psi, d, stage: 16 * psi, "did not divide the sharded states by d"),
        (lambda psi, d, stage: _zero(psi, d, stage, shard_all=True), "divided every state by d"),
        (lambda psi, d, stage: _zero(psi, d, stage, k=8), "master weights"),
        (
            lambda psi, d, stage: _zero(psi, d, min(stage + 1, 3)),
            "this is stage 1's memory, not stage 0's",
        ),
        (lambda psi, d, stage: 1.5e10, "too"),
    ],
)
def test_zero_slips(fn, reason, capsys):
    assert reason in failure("memory_time.zero_bytes", fn, capsys)


def _act(s, b, h, a, t, sp, recompute, *, e=2, t_mul=False, sp_ignored=False, sel=True):
    sbh, tt = s * b * h, (1 / t if t_mul else t)
    sp = sp and not sp_ignored
    if recompute == "full":
        return e * sbh / (tt if sp else 1)
    scores = 0 if recompute == "selective" and sel else 5 * a * s / h
    return e / 2 * (sbh / tt * (34 + scores) if sp else sbh * (10 + 24 / tt + scores / tt))


@pytest.mark.parametrize(
    "kw, reason",
    [
        (dict(e=4), "counted 4-byte activations"),
        (dict(t_mul=True), "multiplied by t"),
        (dict(sp_ignored=True), "sequence parallelism also splits the 10sbh"),
        (dict(sel=False), "selective recomputation drops the 5as²b"),
    ],
)
def test_activation_slips(kw, reason, capsys):
    out = failure("memory_time.activations", lambda *a, **k: _act(*a, **k, **kw), capsys)
    assert reason in out


def _mfu(B, s, L, h, V, seconds, gpus, peak, *, fwd_only=False, percent=False, six_nd=False):
    f = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    if six_nd:
        f = 6 * (12 * L * h**2 + 13 * L * h + (V + s) * h) * B * s
    u = f / (3 if fwd_only else 1) / (seconds * gpus * peak)
    return 100 * u if percent else u


@pytest.mark.parametrize(
    "kw, reason",
    [
        (dict(fwd_only=True), "only the forward pass"),
        (dict(percent=True), "not a percentage"),
        (dict(six_nd=True), "6ND leaves out the attention"),
    ],
)
def test_mfu_slips(kw, reason, capsys):
    out = failure("memory_time.mfu", lambda *a, **k: _mfu(*a, **k, **kw), capsys)
    assert reason in out


def test_hfu_is_not_mfu(capsys):
    def hfu(B, s, L, h, V, seconds, gpus, peak):  # selective recomputation counted
        f = 72 * B * s * L * h**2 * (1 + s / (3 * h) + V / (12 * h * L))
        return f / (seconds * gpus * peak)

    assert "that is HFU" in failure("memory_time.mfu", hfu, capsys)


def test_a_number_instead_of_a_function(capsys):
    assert "pass your function itself" in failure("memory_time.mfu", 0.514, capsys)


# ------------------------------------------------------------------ measured, not copied
def _measured(stem, *names, solved=True):
    from grading_support import EXERCISES

    from minipar.grading.notebooks import exercise_namespace

    ns = exercise_namespace(EXERCISES / "memory_time" / "solutions" / f"{stem}.py", solved)
    return tuple(ns[n] for n in names)


def _gpt(L, h, a, s, V):
    from minipar.memory_time.gpt import GPTConfig, gpt

    return gpt(GPTConfig(L=L, h=h, a=a, s=s, V=V))


def test_params_measured_solution_starter_and_slips(capsys):
    from minipar.cost.model import param_count

    (good,) = _measured("01_params", "measured_and_predicted")
    (start,) = _measured("01_params", "measured_and_predicted", solved=False)
    task = "memory_time.params_measured"
    assert check(task, good)
    assert "not implemented yet" in failure(task, start, capsys)
    count = lambda m: sum(p.numel() for p in m.parameters())
    nested = lambda m: sum(p.numel() for mod in m.modules() for p in mod.parameters())
    slips = [
        (lambda L, h, a, s, V: (nested(_gpt(L, h, a, s, V)), 0), "once per module"),
        (lambda L, h, a, s, V: (count(_gpt(L, h, a, s, V)) + V * h, 0), "tied output weight"),
        (
            lambda L, h, a, s, V: (count(_gpt(L, h, a, s, V)), param_count(L, h, V, s)),
            "Eq. 2 leaves out the final layer norm",
        ),
        (lambda L, h, a, s, V: 27584, "return (measured, predicted)"),  # one number
    ]
    for fn, reason in slips:
        assert reason in failure(task, fn, capsys)


@pytest.mark.slow
def test_adam_state_measured_over_gloo(capsys):
    measure, predict = _measured("02_zero_bytes", "adam_state_bytes", "predict_adam_state_bytes")
    start = _measured("02_zero_bytes", "adam_state_bytes", "predict_adam_state_bytes", solved=False)
    task = "memory_time.adam_state"
    assert check(task, (measure, predict))
    assert "not implemented yet" in failure(task, start, capsys)
    assert "pass both functions" in failure(task, predict, capsys)
    # wrong measurements (each one launch on 2 ranks; the first stage already fails)
    for wrong, reason in [
        (with_step, "includes Adam's scalar step counter"),
        (one_moment, "Adam keeps two moments"),
    ]:
        assert reason in failure(task, (wrong, predict), capsys)
    # wrong predictions, against the right measurement
    for wrong, reason in [
        (lambda psi, d, stage: 12 * psi / (d if stage else 1), "mixed precision"),
        (lambda psi, d, stage: 8 * psi, "divide by d"),
        (lambda psi, d, stage: 8 * psi / d, "stage 0 shards nothing"),
    ]:
        assert reason in failure(task, (measure, wrong), capsys)


def with_step(rank, world_size, stage):
    from minipar.grading.memory_time import _reference_adam_bytes

    return _reference_adam_bytes(stage, count_step=True)


def one_moment(rank, world_size, stage):
    from minipar.grading.memory_time import _reference_adam_bytes

    return _reference_adam_bytes(stage) // 2
