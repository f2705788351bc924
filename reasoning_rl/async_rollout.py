"""Asynchronous rollouts with a staleness bound (``rollout.max_staleness: k``, docs/offpolicy.md).

With k >= 1 the training rollouts are sampled in a generator process of their own (torch.multiprocessing,
spawn, one thread), with its own copy of the policy, while the trainer updates. The rule, for a run of
training steps s = 0, 1, ... where version v is the policy after v updates:

    the batch of step s is sampled with the weights of version  max(0, s - k)

exactly: sampling is paced (the generator waits for that version), never discarded, and never more than k
versions old. So while the trainer runs update s - 1 (which makes version s), the generator samples the
batch of step s + k - 1 ... s + k with versions it already has; on 2 cores with k = 1 the sampling of step
s + 1 overlaps the update of step s. The run is deterministic, and it samples what the synchronous
``rollout.inject.stale=k`` run of the same seed samples (the same weights, prompts and seed per step).

What travels (:class:`AsyncEngine`, the trainer side):
- requests: a step's prompts, group size, sampling settings, seed and the version to sample with, sent
  up to k steps ahead (:meth:`AsyncEngine.prefetch`); the prompts of a future step come from the prompt
  sampler's :meth:`~reasoning_rl.prompt_sampler.PromptSampler.upcoming`, and the algorithm's own request
  must then match the one prefetched (else the run stops, naming both);
- weights: every version, after each update, as one flat shared-memory tensor per dtype
  (:func:`pack_state`: one copy of the parameters, no pickling of tensors one by one);
- results: the completions (token ids, text, behaviour log-probs, ``policy_version``). Rewards are
  computed by the trainer, as in the synchronous loop.

A generator that dies (or raises) stops the run with an :class:`GeneratorError` naming its exit code
and traceback; the trainer never waits on a dead process.
"""

from __future__ import annotations

import copy
import logging
import os
import queue
import time
import traceback
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How often a waiting side checks that the other is alive, in seconds."""


class GeneratorError(RuntimeError):
    """The generator process died or raised: the run cannot go on (status failed)."""


# -- weights as flat tensors --------------------------------------------------------------------------
Layout = list[tuple[str, torch.dtype, tuple[int, ...], int]]
"""(name, dtype, shape, offset in that dtype's buffer) of each tensor of a state dict."""


def pack_state(state: dict[str, torch.Tensor]) -> tuple[dict[torch.dtype, torch.Tensor], Layout]:
    """A state dict as one flat tensor per dtype (a copy) and the layout that unpacks it. A tensor that is
    another's (tied embeddings: the same storage, offset and shape) is stored once."""
    layout: Layout = []
    parts: dict[torch.dtype, list[torch.Tensor]] = {}
    sizes: dict[torch.dtype, int] = {}
    seen: dict[tuple[int, torch.dtype, tuple[int, ...]], int] = {}
    for name, t in state.items():
        t = t.detach()
        key = (t.data_ptr(), t.dtype, tuple(t.shape))
        if key in seen and t.is_contiguous():
            layout.append((name, t.dtype, tuple(t.shape), seen[key]))
            continue
        seen[key] = sizes.get(t.dtype, 0)
        layout.append((name, t.dtype, tuple(t.shape), sizes.get(t.dtype, 0)))
        parts.setdefault(t.dtype, []).append(t.reshape(-1))
        sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel()
    return {dtype: torch.cat(ts) for dtype, ts in parts.items()}, layout


def unpack_state(buffers: dict[torch.dtype, torch.Tensor], layout: Layout) -> dict[str, torch.Tensor]:
    """The state dict of :func:`pack_state` (views into ``buffers``)."""
    out = {}
    for name, dtype, shape, offset in layout:
        n = 1
        for d in shape:
            n *= d
        out[name] = buffers[dtype][offset:offset + n].view(shape)
    return out


def load_weights_(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model``'s tensors in place."""
    with torch.no_grad():
        for name, target in model.state_dict().items():
            target.copy_(state[name])


# -- the generator process ----------------------------------------------------------------------------
@dataclass
class Request:
    """One step's rollouts: ``n`` samples of each prompt with the weights of ``version``."""

    step: int
    prompts: list[str]
    n: int
    sampling: Any
    seed: int
    version: int


def _generator_main(model: Any, tokenizer: Any, backend: str, batch_size: int, inbox: Any, outbox: Any,
                    parent_pid: int) -> None:
    """The generator process: serve requests in order, each with the weights of its version."""
    torch.set_num_threads(1)
    try:
        from reasoning_rl.policy.engines import make_engine

        model.requires_grad_(False)
        engine = make_engine(backend, model, tokenizer, batch_size=batch_size)
        weights: dict[int, tuple[dict[torch.dtype, torch.Tensor], Layout]] = {}
        pending: deque[Request] = deque()
        loaded = -1
        while True:
            try:
                kind, payload = inbox.get(timeout=POLL_S)
            except queue.Empty:
                if os.getppid() != parent_pid:  # the trainer is gone: nobody will read the results
                    return
                continue
            if kind == "stop":
                return
            if kind == "weights":
                version, buffers, layout = payload
                weights[version] = (buffers, layout)
            elif kind == "request":
                pending.append(payload)
            while pending and pending[0].version in weights:
                req = pending.popleft()
                if loaded != req.version:
                    load_weights_(model, unpack_state(*weights[req.version]))
                    engine.update_policy(model, req.version)
                    loaded = req.version
                for v in [v for v in weights if v < req.version]:
                    del weights[v]  # versions only go up: older ones are never needed again
                t0 = time.perf_counter()
                groups = engine.generate(req.prompts, req.n, req.sampling, seed=req.seed)
                for g in groups:
                    for c in g:
                        c.policy_version = req.version
                outbox.put(("result", req.step, groups, time.perf_counter() - t0))
    except BaseException:  # reported to the trainer, which stops the run with it
        outbox.put(("error", None, traceback.format_exc(), 0.0))
        raise


class AsyncEngine:
    """The trainer's side of the generator process: a rollout engine whose ``generate`` returns the
    step's prefetched rollouts (module docstring)."""

    def __init__(self, model: Any, tokenizer: Any, backend: str, max_staleness: int, batch_size: int = 64) -> None:
        """Start the generator with a copy of ``model`` (its weights follow by :meth:`update_policy`)."""
        if max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1, got {max_staleness}")
        self.k, self.tokenizer = max_staleness, tokenizer
        ctx = torch.multiprocessing.get_context("spawn")
        self.inbox, self.outbox = ctx.Queue(), ctx.Queue()
        self.process = ctx.Process(target=_generator_main, name="rollout-generator", daemon=True,
                                   args=(copy.deepcopy(model), tokenizer, backend, batch_size, self.inbox,
                                         self.outbox, os.getpid()))
        self.process.start()
        self.sent: deque[Request] = deque()  # requests sent, not yet returned, in step order
        self.next_step = 0  # the first step not yet requested
        self.history: deque[tuple[int, tuple[dict[torch.dtype, torch.Tensor], Layout]]] = deque(maxlen=self.k + 1)
        self.policy_version = 0
        self._metrics: dict[str, float] = {}

    # -- weights
    def update_policy(self, model: Any, version: int) -> None:
        """Send the weights of ``version`` (the trainer's, after ``version`` updates) to the generator."""
        t0 = time.perf_counter()
        self._send_weights(version, pack_state(model.state_dict()))
        self.policy_version = version
        self._metrics["time/weight_sync"] = time.perf_counter() - t0

    def _send_weights(self, version: int, packed: tuple[dict[torch.dtype, torch.Tensor], Layout]) -> None:
        self.history.append((version, packed))
        self.inbox.put(("weights", (version, *packed)))

    def weight_history(self) -> list[tuple[int, dict[str, torch.Tensor]]]:
        """The k versions before the current one (what the next k steps sample with), for a checkpoint."""
        return [(v, {k: t.clone() for k, t in unpack_state(*p).items()}) for v, p in list(self.history)[:-1]]

    def load_history(self, history: Sequence[tuple[int, dict[str, torch.Tensor]]]) -> None:
        """A resumed run's older versions (from the checkpoint), before the current one is sent."""
        for version, state in history:
            self._send_weights(version, pack_state(state))

    # -- requests
    def prefetch(self, requests: Sequence[Request]) -> None:
        """Send the requests of steps not yet requested (in step order)."""
        for req in requests:
            if req.step < self.next_step:
                continue
            if req.step != self.next_step:
                raise ValueError(f"rollout request for step {req.step} skips step {self.next_step}")
            self.sent.append(req)
            self.inbox.put(("request", req))
            self.next_step += 1

    def skip_to(self, step: int) -> None:
        """The first step this run samples (a resumed run's): no request before it is made."""
        self.next_step = step

    def generate(self, prompts: Sequence[str], n: int, sampling: Any, seed: int | None = None) -> list[list[Any]]:
        """The prefetched rollouts of the oldest outstanding request, which must be this one."""
        if not self.sent:
            raise GeneratorError("rollout.max_staleness: the algorithm asked for rollouts no request was sent for "
                                 "(the trainer prefetches each step's before it runs)")
        req = self.sent[0]
        if (list(prompts), n, seed) != (req.prompts, req.n, req.seed) or sampling != req.sampling:
            raise GeneratorError(f"rollout.max_staleness: step {req.step}'s rollouts were prefetched for other "
                                 f"prompts or settings than the algorithm asks for (seed {req.seed} vs {seed}, "
                                 f"n {req.n} vs {n}); this algorithm or setting cannot run asynchronously: set "
                                 f"rollout.max_staleness=0")
        t0 = time.perf_counter()
        _, step, payload, seconds = self._receive()
        self.sent.popleft()
        if step != req.step:
            raise GeneratorError(f"rollout generator returned step {step}, expected {req.step}")
        self._metrics.update({"time/generator_wait": time.perf_counter() - t0, "time/generator_busy": seconds})
        return payload

    def _receive(self) -> tuple[str, int, Any, float]:
        while True:
            try:
                msg = self.outbox.get(timeout=POLL_S)
            except queue.Empty:
                if self.process.is_alive():
                    continue
                try:
                    msg = self.outbox.get(timeout=POLL_S)  # what it put just before it exited
                except queue.Empty:
                    raise GeneratorError(f"the rollout generator process (pid {self.process.pid}) exited with code "
                                         f"{self.process.exitcode} without an error message (killed? out of "
                                         f"memory?); the run stops. Rerun with rollout.max_staleness=0 to sample "
                                         f"in the trainer") from None
            if msg[0] == "error":
                raise GeneratorError(f"the rollout generator process failed; the run stops. Its error:\n{msg[2]}")
            return msg

    def pop_metrics(self) -> dict[str, float]:
        out, self._metrics = self._metrics, {}
        return out

    def close(self) -> None:
        """Stop the generator (it is told to, then terminated if it does not within 10 s)."""
        if self.process.is_alive():
            self.inbox.put(("stop", None))
            self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        for q in (self.inbox, self.outbox):
            q.cancel_join_thread()  # never wait at exit to flush into a dead process's pipe
            q.close()


def async_engine(engine: Any, rollout: Any, model: Any, tokenizer: Any) -> Any:
    """The engine of the training rollouts: ``engine`` itself when ``rollout.max_staleness`` is 0, else an
    :class:`AsyncEngine` (the caller keeps ``engine`` for evaluation)."""
    if not rollout.max_staleness:
        return engine
    return AsyncEngine(model, tokenizer, rollout.backend, rollout.max_staleness, batch_size=rollout.batch_size)
