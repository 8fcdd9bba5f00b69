"""One executor for every schedule: run a rank's action list on real ranks.

    F(s, i)  receive the activation from stage s−1 (stage 0: take the tokens), mark it
             ``requires_grad`` so autograd computes its gradient, run the stage, send the
             output to stage s+1 (the last stage computes the loss instead, scaled by 1/m);
    B(s, i)  receive the output's gradient from stage s+1 (the last stage starts from its loss),
             back-propagate, send the input's gradient to stage s−1; in a schedule with W's,
             B computes only the input gradient (``torch.autograd.grad(out, inp)``);
    W(s, i)  the weight gradients (``torch.autograd.grad(out, params)``), accumulated.

Loss scaling: the full batch's loss is the mean over m equal micro-batches of their mean loss,
so each micro-batch's loss is divided by m and the summed gradients equal the full batch's.
After the last action, the tied embedding's gradient is all-reduced between the first and last
stage. The executor records per action the wall-clock start and end of its work (after the
receive it waited for, so waiting shows as idle), and the activations held (count and bytes
saved for backward) so their high-water can be compared with the model.

The B/W split here is for exactness, not speed: W back-propagates through the stage again
(``retain_graph``), where the zero-bubble papers split each matmul's backward in two.
"""

from __future__ import annotations

import time
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


def _accumulate(params, grads) -> None:
    for prm, g in zip(params, grads):
        if g is not None:
            prm.grad = g if prm.grad is None else prm.grad + g


class PipelineExecutor:
    """Runs action lists on one rank. ``stages``: {global stage: module} of this rank;
    ``num_stages`` = v·p; ``loss_fn(logits, targets)`` returns a mean loss;
    ``embedding_group`` the process group of the first and last stage's ranks (or None)."""

    def __init__(
        self,
        stages: dict,
        num_stages: int,
        rank: int,
        p: int,
        m: int,
        loss_fn=None,
        group=None,
        embedding_group=None,
        loss_scale: float | None = None,
    ):
        self.stages, self.num_stages, self.rank, self.p, self.m = stages, num_stages, rank, p, m
        self.loss_fn = loss_fn or (lambda y, t: F.cross_entropy(y.flatten(0, 1), t.flatten()))
        self.comm = P2P(rank, p, m, group)
        self.embedding_group = embedding_group
        self.loss_scale = 1.0 / m if loss_scale is None else loss_scale

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
        rec = StepRecord()
        t0 = time.perf_counter() if t0 is None else t0
        stash: dict[tuple, list] = {}  # (s, i) -> [input, output, grad_out, saved_bytes]
        live_bytes = 0
        split = any(a.op == "W" for a in actions)
        for a in actions:
            s, i = a.stage, a.microbatch
            mod = self.stages[s]
            if a.op == "F":
                if s == 0:  # tokens; a float input (a benchmark's) is treated as received
                    x = inputs[i]
                    if x.is_floating_point():
                        x = x.detach().requires_grad_()
                else:
                    x = self.comm.recv(act_shape, dtype, s, s - 1, i, ACTIVATION)
                    x = self.received_activation(x)
                start = time.perf_counter() - t0
                saved = [0]

                def pack(t, saved=saved):
                    saved[0] += t.untyped_storage().nbytes()
                    return t

                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    y = mod(x)
                    if s == self.num_stages - 1:
                        loss = self.loss_fn(y, targets[i])
                        rec.losses.append(loss.item())
                        y = loss * self.loss_scale
                if s < self.num_stages - 1:
                    self.comm.send(y, s + 1, i, ACTIVATION)
                stash[s, i] = [x, y, None, saved[0]]
                live_bytes += saved[0]
                rec.peak_in_flight = max(rec.peak_in_flight, len(stash))
                rec.peak_saved_bytes = max(rec.peak_saved_bytes, live_bytes)
            elif a.op == "B":
                x, y, _, nbytes = stash[s, i]
                g = (
                    None
                    if s == self.num_stages - 1
                    else self.comm.recv(act_shape, dtype, s, s + 1, i, GRADIENT)
                )
                start = time.perf_counter() - t0
                if split:
                    stash[s, i][2] = g
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
                    del stash[s, i]
                    live_bytes -= nbytes
            else:  # W
                start = time.perf_counter() - t0
                x, y, g, nbytes = stash.pop((s, i))
                params = [q for q in mod.parameters() if q.requires_grad]
                _accumulate(params, torch.autograd.grad(y, params, g))
                live_bytes -= nbytes
            synchronize()  # CUDA runs asynchronously: end when the work has ended
            rec.timeline.append((self.rank, a, start, time.perf_counter() - t0))
        self.comm.wait_all()
        if stash:
            raise RuntimeError(f"rank {self.rank}: actions {sorted(stash)} never ran backward")
        first, last = self.stages.get(0), self.stages.get(self.num_stages - 1)
        holder = first if first is not None else last
        tied = getattr(holder, "tied_weight", lambda: None)()
        all_reduce_tied_gradient(tied, self.embedding_group)
        return rec
