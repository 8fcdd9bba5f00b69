"""Run a schedule on paper: start times, the bubble, and micro-batches in flight per rank.

Every rank runs its list in order; an action starts when its rank is free and its inputs exist:
F(s, i) needs F(s−1, i); B(s, i) F(s, i) and B(s+1, i); W(s, i) B(s, i). If no rank can start
its next action the schedule deadlocks (:class:`ScheduleError` names the blocked actions).
Durations are per *rank's whole share* of the model (t_F, t_B, t_W), 1/v of them per chunk; in
a schedule without W, B is the whole backward, t_B + t_W.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .schedules import Action, num_stages, splits_backward


class ScheduleError(ValueError):
    """A schedule that cannot run: deadlock, missing or repeated actions, wrong owner."""


@dataclass
class Simulation:
    p: int
    v: int
    m: int
    makespan: float
    busy: list[float]  # per rank
    peak_in_flight: list[int]  # per rank, in (chunk, micro-batch) activations
    timeline: list[tuple[int, Action, float, float]] = field(repr=False)  # rank, action, t0, t1

    @property
    def idle_fraction(self) -> list[float]:
        return [1 - b / self.makespan for b in self.busy]

    @property
    def bubble(self) -> float:
        """Mean over ranks of the idle fraction of the step (GPipe's convention)."""
        return sum(self.idle_fraction) / self.p

    @property
    def peak_in_flight_stages(self) -> list[float]:
        """Peak activations per rank in units of one stage of a v = 1 pipeline (chunk / v)."""
        return [k / self.v for k in self.peak_in_flight]


def check_actions(actions: list[list[Action]], m: int) -> None:
    """Each rank runs only stages it owns; every needed action appears exactly once."""
    p, n_st = len(actions), num_stages(actions)
    if n_st % p:
        raise ScheduleError(f"stages ({n_st}) must be a multiple of ranks p ({p})")
    ops = ("F", "B", "W") if splits_backward(actions) else ("F", "B")
    seen = set()
    for r, acts in enumerate(actions):
        for a in acts:
            if a.op not in ops:
                raise ScheduleError(f"rank {r}: op {a.op!r} must be one of {ops}")
            if a.stage % p != r:
                raise ScheduleError(
                    f"rank {r} runs {a} but stage {a.stage} belongs to rank "
                    f"{a.stage % p} (stage mod p)"
                )
            if not 0 <= a.microbatch < m:
                raise ScheduleError(f"rank {r}: micro-batch in {a} must be in 0..{m - 1}")
            if a in seen:
                raise ScheduleError(f"rank {r} runs {a} twice")
            seen.add(a)
    missing = [
        Action(o, s, i)
        for o in ops
        for s in range(n_st)
        for i in range(m)
        if Action(o, s, i) not in seen
    ]
    if missing:
        raise ScheduleError(f"{len(missing)} actions missing, first {missing[0]}")


def _deps(a: Action, n_st: int) -> list[Action]:
    if a.op == "F":
        return [Action("F", a.stage - 1, a.microbatch)] if a.stage else []
    if a.op == "B":
        d = [Action("F", a.stage, a.microbatch)]
        return d + ([Action("B", a.stage + 1, a.microbatch)] if a.stage < n_st - 1 else [])
    return [Action("B", a.stage, a.microbatch)]


def op_durations(actions: list[list[Action]], t_f: float, t_b: float, t_w: float) -> dict:
    """Seconds of one F, B and W action: a rank's share (t_F, t_B, t_W) over its v chunks; in a
    schedule without W, B is the whole backward, t_B + t_W."""
    v, split = num_stages(actions) // len(actions), splits_backward(actions)
    return {"F": t_f / v, "B": (t_b if split else t_b + t_w) / v, "W": t_w / v}


def play(
    actions: list[list[Action]], duration, *, comm: float = 0.0, wait: float = 0.0
) -> list[tuple[int, Action, float, float]]:
    """The event loop of the simulator: every rank runs its list in order, an action as soon as
    its rank is free and its inputs exist (:func:`_deps`). It takes ``duration(a)`` seconds and
    starts ``comm`` after each input made on another rank, and ``wait`` after the latest of all
    when any input crossed ranks. Returns (rank, action, start, end) in the order the actions
    ran; raises :class:`ScheduleError` when no rank can start its next action."""
    p, n_st = len(actions), num_stages(actions)
    done: dict[Action, tuple[int, float]] = {}  # action -> (rank, end time)
    pos, free = [0] * p, [0.0] * p
    timeline = []
    while any(pos[r] < len(actions[r]) for r in range(p)):
        progressed = False
        for r in range(p):
            while pos[r] < len(actions[r]):
                a = actions[r][pos[r]]
                deps = _deps(a, n_st)
                if any(d not in done for d in deps):
                    break
                remote = [done[d][0] != r for d in deps]
                start = max(
                    [free[r]] + [done[d][1] + (comm if x else 0.0) for d, x in zip(deps, remote)]
                ) + (wait if any(remote) else 0.0)
                end = start + duration(a)
                done[a], free[r] = (r, end), end
                timeline.append((r, a, start, end))
                pos[r] += 1
                progressed = True
        if not progressed:
            blocked = [
                f"rank {r} at {actions[r][pos[r]]}" for r in range(p) if pos[r] < len(actions[r])
            ]
            raise ScheduleError("deadlock: every rank waits (" + ", ".join(blocked) + ")")
    return timeline


def simulate(
    actions: list[list[Action]],
    m: int | None = None,
    t_f: float = 1.0,
    t_b: float = 1.0,
    t_w: float = 1.0,
    comm: float = 0.0,
) -> Simulation:
    """Times every action of ``actions`` (see module docstring); ``comm`` is added to every
    dependency that crosses ranks. Raises :class:`ScheduleError` on a deadlock."""
    if m is None:
        m = 1 + max(a.microbatch for acts in actions for a in acts)
    check_actions(actions, m)
    p, v = len(actions), num_stages(actions) // len(actions)
    dur = op_durations(actions, t_f, t_b, t_w)
    timeline = play(actions, lambda a: dur[a.op], comm=comm)
    free, busy, live, peak = [0.0] * p, [0.0] * p, [0] * p, [0] * p
    release = "W" if splits_backward(actions) else "B"
    for r, a, _, end in timeline:
        free[r] = end
        busy[r] += dur[a.op]
        if a.op == "F":
            live[r] += 1
            peak[r] = max(peak[r], live[r])
        elif a.op == release:
            live[r] -= 1
    return Simulation(p, v, m, max(free), busy, peak, timeline)
