"""One executor for every schedule: run a rank's action list on real ranks.

    F(s, i)  receive the activation from stage s−1 (stage 0: the tokens) as a leaf that
             requires grad, run the stage, send the output on (the last stage computes the
             loss, scaled by 1/m, so the m micro-batches' summed gradients are the batch's);
    B(s, i)  receive the output's gradient (the last stage starts from its loss),
             back-propagate, send the input's gradient back; with W's in the schedule, B
             computes only the input gradient (``torch.autograd.grad(out, inp)``);
    W(s, i)  the weight gradients (``torch.autograd.grad(out, params)``), accumulated.

After the last action the tied embedding's gradient is all-reduced between the first and last
stage. Per action the executor records the wall-clock start and end of its work (after its
receive, so waiting shows as idle) and the activations held (count and saved bytes). The B/W
split is for exactness, not speed: W back-propagates through the stage again
(``retain_graph``), where the zero-bubble papers split each matmul's backward in two.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from minipar.runtime.device import synchronize

from .communication import ACTIVATION, GRADIENT, P2P, all_reduce_tied_gradient, message_order
from .schedules import NAMES, Action, schedule


@dataclass
class StepRecord:
    timeline: list = field(default_factory=list)  # (rank, Action, start, end) in seconds
    losses: list = field(default_factory=list)  # unscaled loss per micro-batch (last stage)
    peak_in_flight: int = 0  # (stage, micro-batch) activations held
    peak_saved_bytes: int = 0  # bytes autograd saved for them, at peak


@dataclass(frozen=True)
class LastStageLoss:
    """What the last stage back-propagates: ``fn(logits, targets)``, a mean loss (None: the
    cross-entropy over (b·s, V)), times ``scale`` (None: 1/m, so the m micro-batches' summed
    gradients are the whole batch's)."""

    fn: Callable | None = None
    scale: float | None = None


@dataclass
class _Step:
    """One ``run``'s inputs and what it accumulates while the actions run."""

    inputs: list  # tokens (b, s) per micro-batch, or a benchmark's float (b, s, h)
    targets: list
    act_shape: tuple  # (b, s, h) of every message
    dtype: torch.dtype
    t0: float  # the clock's zero for the timeline
    split: bool  # the schedule has W actions: B computes only the input gradient
    rec: StepRecord = field(default_factory=StepRecord)
    stash: dict = field(default_factory=dict)  # (s, i) -> [input, output, grad_out, saved_bytes]
    live_bytes: int = 0


def _accumulate(params, grads) -> None:
    for prm, g in zip(params, grads):
        if g is not None:
            prm.grad = g if prm.grad is None else prm.grad + g


class PipelineExecutor:
    """Runs action lists on one rank. ``stages``: {global stage: module} of this rank;
    ``num_stages`` = v·p; ``group`` the pipeline's process group (None: the default group);
    ``embedding_group`` the process group of the first and last stage's ranks (or None);
    ``loss`` what the last stage back-propagates (:class:`LastStageLoss`)."""

    def __init__(
        self,
        stages: dict,
        num_stages: int,
        rank: int,
        p: int,
        m: int,
        group=None,
        embedding_group=None,
        loss: LastStageLoss | None = None,
    ):
        self.stages, self.num_stages, self.rank, self.p, self.m = stages, num_stages, rank, p, m
        loss = loss or LastStageLoss()
        self.loss_fn = loss.fn or (lambda y, t: F.cross_entropy(y.flatten(0, 1), t.flatten()))
        self.comm = P2P(rank, p, m, group)
        self.embedding_group = embedding_group
        self.loss_scale = 1.0 / m if loss.scale is None else loss.scale

    # -- hooks a learner (or a negative control) can replace ----------------------------
    def received_activation(self, x: torch.Tensor) -> torch.Tensor:
        """The receiver's side of the boundary: a leaf that autograd differentiates."""
        return x.requires_grad_()

    def _input_grad(self, s, i, x):
        if x.grad is None:
            raise RuntimeError(
                f"stage {s} micro-batch {i}: the received activation has no "
                ".grad; it must be a leaf that requires grad (send a detached "
                "tensor, call requires_grad_() on the receiver)"
            )
        return x.grad

    # -- one step ---------------------------------------------------------------------------
    def full_schedule(self, actions: list[Action]) -> list[list[Action]] | None:
        """Every rank's list of the named schedule whose list for this rank is ``actions``."""
        v = self.num_stages // self.p
        for name in NAMES:
            try:
                lists = schedule(name, self.p, self.m, v)
            except ValueError:
                continue
            if lists[self.rank] == list(actions):
                return lists
        return None

    def run(
        self,
        actions: list[Action],
        inputs: list,
        targets: list,
        act_shape: tuple,
        dtype=torch.float64,
        t0: float | None = None,
        all_actions: list[list[Action]] | None = None,
    ) -> StepRecord:
        """Run ``actions`` for micro-batches ``inputs[i]`` (tokens (b, s)), ``targets[i]``;
        ``act_shape`` = (b, s, h) of the messages. ``all_actions`` (every rank's list) fixes
        the order messages are posted in (``communication`` explains why); a named schedule's
        lists are found without it. Returns the step's record."""
        full = all_actions if all_actions is not None else self.full_schedule(actions)
        order = None if full is None else message_order(full, self.rank, self.m)
        self.comm.set_order(order, like=(act_shape, dtype))
        t0 = time.perf_counter() if t0 is None else t0
        st = _Step(inputs, targets, act_shape, dtype, t0, any(a.op == "W" for a in actions))
        do = {"F": self._forward, "B": self._backward, "W": self._weight}
        for a in actions:
            start = do[a.op](a.stage, a.microbatch, st)
            synchronize()  # CUDA runs asynchronously: end when the work has ended
            st.rec.timeline.append((self.rank, a, start, time.perf_counter() - t0))
        self.comm.wait_all()
        if st.stash:
            raise RuntimeError(f"rank {self.rank}: actions {sorted(st.stash)} never ran backward")
        first, last = self.stages.get(0), self.stages.get(self.num_stages - 1)
        holder = first if first is not None else last
        tied = getattr(holder, "tied_weight", lambda: None)()
        all_reduce_tied_gradient(tied, self.embedding_group)
        return st.rec

    # -- the three actions; each returns its start on the step's clock ---------------------
    def _forward(self, s: int, i: int, st: _Step) -> float:
        """F(s, i): receive (or take the tokens), run the stage, send (or compute the loss)."""
        if s == 0:  # tokens; a float input (a benchmark's) is treated as received
            x = st.inputs[i]
            if x.is_floating_point():
                x = x.detach().requires_grad_()
        else:
            x = self.comm.recv(st.act_shape, st.dtype, s, s - 1, i, ACTIVATION)
            x = self.received_activation(x)  # (b, s, h)
        start = time.perf_counter() - st.t0
        saved = [0]

        def pack(t, saved=saved):
            saved[0] += t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = self.stages[s](x)
            if s == self.num_stages - 1:
                loss = self.loss_fn(y, st.targets[i])
                st.rec.losses.append(loss.item())
                y = loss * self.loss_scale
        if s < self.num_stages - 1:
            self.comm.send(y, s + 1, i, ACTIVATION)
        st.stash[s, i] = [x, y, None, saved[0]]
        st.live_bytes += saved[0]
        st.rec.peak_in_flight = max(st.rec.peak_in_flight, len(st.stash))
        st.rec.peak_saved_bytes = max(st.rec.peak_saved_bytes, st.live_bytes)
        return start

    def _backward(self, s: int, i: int, st: _Step) -> float:
        """B(s, i): receive the output's gradient (the last stage starts from its loss),
        back-propagate, send the input's gradient; only the input's when W is split off."""
        x, y, _, nbytes = st.stash[s, i]
        last = s == self.num_stages - 1
        g = None if last else self.comm.recv(st.act_shape, st.dtype, s, s + 1, i, GRADIENT)
        start = time.perf_counter() - st.t0
        if st.split:
            st.stash[s, i][2] = g
            if s > 0 and not x.requires_grad:
                self._input_grad(s, i, x)  # raises: the rule it broke
            if x.requires_grad:
                (gx,) = torch.autograd.grad(y, [x], g, retain_graph=True)
                if s > 0:
                    self.comm.send(gx, s - 1, i, GRADIENT)
        else:
            torch.autograd.backward(y, g)
            if s > 0:
                self.comm.send(self._input_grad(s, i, x), s - 1, i, GRADIENT)
            del st.stash[s, i]
            st.live_bytes -= nbytes
        return start

    def _weight(self, s: int, i: int, st: _Step) -> float:
        """W(s, i): the stage's weight gradients from the output gradient B kept, added in."""
        start = time.perf_counter() - st.t0
        x, y, g, nbytes = st.stash.pop((s, i))
        params = [q for q in self.stages[s].parameters() if q.requires_grad]
        _accumulate(params, torch.autograd.grad(y, params, g))
        st.live_bytes -= nbytes
        return start
