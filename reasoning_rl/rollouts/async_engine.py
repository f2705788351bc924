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

The work is split so that both sides of a step cost about the same (the generator's core would idle
otherwise). For each step the generator process

    samples      the completions (the engine of ``rollout.backend``)
    scores       their rewards (the task's reward, in reward workers of its own), and
    references   their log-probs under the frozen pi_ref, in the micro-batches and precision of the
                 update (:class:`reasoning_rl.algo.batch.ReferenceJob`), when the algorithm offers one
                 (``GRPO.generator_reference``; the rule: reasoning_rl.async_checks.reference_refusal)

and the trainer's critical path is the policy forward and backward. What the generator computed is
exactly what the trainer would have: the rewards come from the same verifiers on the same inputs
(:class:`PrescoredReward` hands them over only for exactly those inputs, else the trainer scores), and the
reference log-probs from the same rows in the same micro-batches (bit-identical at the same thread count;
float rounding of the matrix products otherwise, docs/offpolicy.md).

What travels (:class:`AsyncEngine`, the trainer side):
- requests (:class:`~reasoning_rl.rollouts.sampling.Request`): a step's prompts (with their references and
  fields, for the rewards), group size, sampling settings, seed and the version to sample with, sent up to
  k steps ahead (:meth:`AsyncEngine.prefetch`); what a future step samples is the algorithm's to say
  (``Algorithm.next_request``, asked by the rollout stack, reasoning_rl.rollouts.stack) from the prompt
  sampler's :meth:`~reasoning_rl.rollouts.prompt_sampler.PromptSampler.upcoming` prompts, and the
  algorithm's own call must then match the request prefetched (else the run stops, naming both);
- weights: every version, after each update, as one flat shared-memory tensor per dtype
  (:func:`~reasoning_rl.rollouts.weight_transport.pack_state`: one copy of the parameters, no pickling
  of tensors one by one); the reference once
  (its tensors shared with the trainer's copy, no second one);
- results: the completions (token ids, text, behaviour log-probs, ``policy_version``, ``ref_logprobs``)
  and their rewards (:class:`Scored`), with the seconds each part took.

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
from dataclasses import dataclass, field
from typing import Any

import torch

from reasoning_rl.algo.batch import ReferenceJob
from reasoning_rl.rollouts.sampling import Request
from reasoning_rl.rollouts.weight_transport import Layout, load_weights_, pack_state, unpack_state

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How often a waiting side checks that the other is alive, in seconds."""


class GeneratorError(RuntimeError):
    """The generator process died or raised: the run cannot go on (status failed)."""


# -- what the generator computes besides sampling ----------------------------------------------------
@dataclass
class Scored:
    """The rewards the generator computed for one step's completions, with the exact inputs it scored."""

    texts: list[str]
    references: list[Any]
    fields: list[dict[str, Any]]
    scores: Any
    """What ``reward.score(texts, references, fields)`` returned (rewards.compose.CompositeScores)."""

    def matches(self, texts: Sequence[str], references: Sequence[Any], fields: Sequence[Any] | None) -> bool:
        """Whether ``reward.score`` is asked for exactly what was scored (``fields`` None: no fields)."""
        return (list(texts), list(references), [dict(f) for f in fields or [{} for _ in texts]]) == \
            (self.texts, self.references, self.fields)


def score_step(reward: Any, groups: Sequence[Sequence[Any]], req: Request, timeout: float, pool: Any) -> Scored:
    """The rewards of one request's completions, from the inputs the trainer's rollout scores
    (reasoning_rl.algo.groups.sample_and_score: each prompt's reference, its fields and the completion's length)."""
    completions = [c for g in groups for c in g]
    refs = [ref for ref, g in zip(req.references, groups) for _ in g]
    fields = [{**f, "num_completion_tokens": c.num_tokens} for f, g in zip(req.fields, groups) for c in g]
    texts = [c.text for c in completions]
    return Scored(texts, refs, fields, reward.score(texts, refs, fields, timeout=timeout, pool=pool))


class PrescoredReward:
    """The trainer's reward (``ctx.reward``) when the generator scores the rollouts: :meth:`score` returns
    the scores the generator computed when asked for exactly the inputs it scored (the verifiers are pure
    functions of them), and scores in the trainer otherwise (warning once). Everything else is the
    task's reward's (``specs``, ``verifiers``, ``none_policy``: a CompositeReward's)."""

    def __init__(self, reward: Any, engine: AsyncEngine) -> None:
        self.reward, self.engine = reward, engine
        self.specs, self.verifiers, self.none_policy = reward.specs, reward.verifiers, reward.none_policy
        self._warned = False

    def score(self, completions: Sequence[str], references: Sequence[Any],
              fields: Sequence[Any] | None = None, *, timeout: float = 10.0, pool: Any = None) -> Any:
        scored = self.engine.take_scored()
        if scored is not None and scored.matches(completions, references, fields):
            return scored.scores
        if scored is not None and not self._warned:
            self._warned = True
            log.warning("rollout.max_staleness: the generator scored other inputs than the rollout asks for "
                        "(reasoning_rl.rollouts.async_engine.score_step and reasoning_rl.algo.groups.sample_and_score "
                        "differ); the trainer scores such steps itself (correct, slower)")
        return self.reward.score(completions, references, fields, timeout=timeout, pool=pool)


# -- the generator process ----------------------------------------------------------------------------
@dataclass
class RewardSettings:
    """How the generator scores: the task's reward, ``rollout.reward_workers``, ``rollout.reward_timeout``."""

    reward: Any
    workers: int | None
    timeout: float


@dataclass
class Result:
    """One request's completions, their rewards (None: not scored there) and the seconds of each part."""

    step: int
    groups: list[list[Any]]
    scored: Scored | None
    seconds: dict[str, float] = field(default_factory=dict)


def _generator_main(model: Any, tokenizer: Any, backend: str, batch_size: int, rewards: RewardSettings | None,
                    inbox: Any, outbox: Any, parent_pid: int) -> None:
    """The generator process: serve requests in order, each with the weights of its version; score the
    completions and compute their reference log-probs when it has what they need."""
    torch.set_num_threads(1)
    pool = None
    try:
        from reasoning_rl.policy.engines import make_engine
        from rewards.pool import WorkerPool

        model.requires_grad_(False)
        engine = make_engine(backend, model, tokenizer, batch_size=batch_size)
        if rewards is not None:
            pool = WorkerPool(rewards.workers)
        reference: ReferenceJob | None = None
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
            elif kind == "reference":
                reference = payload
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
                outbox.put(("result", _serve(req, engine, reference, rewards, pool)))
    except BaseException:  # reported to the trainer, which stops the run with it
        outbox.put(("error", traceback.format_exc()))
        raise
    finally:
        if pool is not None:
            pool.close()


def _serve(req: Request, engine: Any, reference: ReferenceJob | None, rewards: RewardSettings | None,
           pool: Any) -> Result:
    """Sample one request; then its reference log-probs and its rewards, when the generator does them."""
    t0 = time.perf_counter()
    groups = engine.generate(req.prompts, req.n, req.sampling, seed=req.seed)
    completions = [c for g in groups for c in g]
    for c in completions:
        c.policy_version = req.version
    seconds = {"sample": time.perf_counter() - t0}
    if reference is not None:
        t0 = time.perf_counter()
        for c, lp in zip(completions, reference.logprobs(completions, req.sampling)):
            c.ref_logprobs = lp
        seconds["reference"] = time.perf_counter() - t0
    scored = None
    if rewards is not None and req.references is not None and req.fields is not None:
        t0 = time.perf_counter()
        scored = score_step(rewards.reward, groups, req, rewards.timeout, pool)
        seconds["reward"] = time.perf_counter() - t0
    return Result(req.step, groups, scored, seconds)


class AsyncEngine:
    """The trainer's side of the generator process: a rollout engine whose ``generate`` returns the
    step's prefetched rollouts (module docstring)."""

    def __init__(self, model: Any, tokenizer: Any, backend: str, max_staleness: int, batch_size: int = 64,
                 rewards: RewardSettings | None = None) -> None:
        """Start the generator with a copy of ``model`` (its weights follow by :meth:`update_policy`); with
        ``rewards`` it scores the completions too (the trainer reads them through :class:`PrescoredReward`)."""
        if max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1, got {max_staleness}")
        self.k, self.tokenizer = max_staleness, tokenizer
        ctx = torch.multiprocessing.get_context("spawn")
        self.inbox, self.outbox = ctx.Queue(), ctx.Queue()
        self.process = ctx.Process(target=_generator_main, name="rollout-generator", daemon=True,
                                   args=(copy.deepcopy(model), tokenizer, backend, batch_size, rewards, self.inbox,
                                         self.outbox, os.getpid()))
        self.process.start()
        self.sent: deque[Request] = deque()  # requests sent, not yet returned, in step order
        self.next_step = 0  # the first step not yet requested
        self.history: deque[tuple[int, tuple[dict[torch.dtype, torch.Tensor], Layout]]] = deque(maxlen=self.k + 1)
        self.policy_version = 0
        self.scores_rewards = rewards is not None
        self.reference_sent = False
        self._scored: Scored | None = None
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

    def set_reference(self, job: ReferenceJob) -> None:
        """From now on the generator computes the reference log-probs of its completions (``job``, sent
        once; before the first request, so every step's completions carry them)."""
        if self.sent or self.next_step:
            raise ValueError("the reference must reach the generator before the first rollout request")
        self.inbox.put(("reference", job))
        self.reference_sent = True

    # -- requests
    def prefetch(self, requests: Sequence[Request]) -> None:
        """Send the requests of steps not yet requested (in step order)."""
        for req in requests:
            if req.step < self.next_step:
                continue
            if req.step != self.next_step:
                raise ValueError(f"rollout request for step {req.step} skips step {self.next_step}")
            if req.version is None:
                raise ValueError(f"rollout request for step {req.step} names no policy version to sample with")
            self.sent.append(req)
            self.inbox.put(("request", req))
            self.next_step += 1

    def skip_to(self, step: int) -> None:
        """The first step this run samples (a resumed run's): no request before it is made."""
        self.next_step = step

    def generate(self, prompts: Sequence[str], n: int, sampling: Any, seed: int | None = None) -> list[list[Any]]:
        """The prefetched rollouts of the oldest outstanding request, which must be this one (their rewards,
        when the generator scored them, wait for :meth:`take_scored`)."""
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
        result = self._receive()
        self.sent.popleft()
        if result.step != req.step:
            raise GeneratorError(f"rollout generator returned step {result.step}, expected {req.step}")
        self._scored = result.scored
        self._metrics.update({"time/generator_wait": time.perf_counter() - t0,
                              "time/generator_busy": sum(result.seconds.values()),
                              **{f"time/generator_{part}": s for part, s in result.seconds.items()}})
        return result.groups

    def take_scored(self) -> Scored | None:
        """The rewards of the rollouts :meth:`generate` returned last (once; None when not scored there)."""
        out, self._scored = self._scored, None
        return out

    def _receive(self) -> Result:
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
                raise GeneratorError(f"the rollout generator process failed; the run stops. Its error:\n{msg[1]}")
            return msg[1]

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
