# %% [markdown]
# # Exercise 2: bucketed all-reduce launched from gradient hooks
#
# Write a class `Bucketed(model, bucket_cap_bytes)` with a method `finish()`, the core of
# PyTorch DDP:
#
# 1. Put the trainable parameters (`p.requires_grad`) into buckets **in reverse order** (backward
#    produces the last layer's gradients first); close a bucket once it holds
#    `bucket_cap_bytes` or more.
# 2. Register `p.register_post_accumulate_grad_hook(hook)` on each trainable parameter: it fires
#    when `p.grad` holds this backward's accumulated gradient (once, even for a tied weight).
# 3. When every gradient of a bucket is ready, flatten them (`torch.cat`) and start
#    `dist.all_reduce(flat, async_op=True)` **while backward continues**. Launch buckets in
#    bucket order on every rank.
# 4. `finish()` waits for every launched all-reduce, divides by n, copies the means back into
#    the `.grad` tensors, and resets the state for the next step.
#
# The checker (3 ranks, 2 KiB buckets) wants the full-batch gradients, exactly Ψ·4 bytes
# all-reduced per step, one all-reduce per bucket of the rule above, and at least one started
# before the last gradient's hook fires.
#
# What the check holds you to: here the method is the task: besides the gradients (within 1e-5
# relative, 1e-6 absolute of one process's), the check counts the all-reduces (one per bucket of
# the cap) and when they start (before the last gradient is ready).
#
# The course's code: an answer may call torch, the launcher and the answers of the earlier
# exercises it builds on, not the course's implementation of what the task asks (here the
# all-reduce, bucketed DDP, accumulation and ZeRO of `minipar.data_parallel`); the check fails an
# answer that calls it, whatever its values.
# %%
import torch
import torch.distributed as dist

from minipar.grading import check


# %%
class Bucketed:
    def __init__(self, model, bucket_cap_bytes):
        # BEGIN SOLUTION
        self.n = dist.get_world_size()
        self.buckets, size = [], 0
        for p in reversed([p for p in model.parameters() if p.requires_grad]):
            if not self.buckets or size >= bucket_cap_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.where = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.reset()
        for b in self.buckets:
            for p in b:
                p.register_post_accumulate_grad_hook(self.hook)
        # END SOLUTION

    def reset(self):
        # BEGIN SOLUTION
        self.missing = [len(b) for b in self.buckets]
        self.next, self.inflight = 0, []
        # END SOLUTION

    def hook(self, p):
        # BEGIN SOLUTION
        self.missing[self.where[id(p)]] -= 1
        while self.next < len(self.buckets) and self.missing[self.next] == 0:
            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[self.next]])
            self.inflight.append((dist.all_reduce(flat, async_op=True), flat, self.next))
            self.next += 1
        # END SOLUTION

    def finish(self):
        # BEGIN SOLUTION
        for work, flat, i in self.inflight:
            work.wait()
            flat.div_(self.n)
            offset = 0
            for p in self.buckets[i]:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        self.reset()
        # END SOLUTION


# %% [check]
check("data_parallel.bucketed", Bucketed)
