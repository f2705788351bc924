"""Mismatch injection (``rollout.inject``): the sampler differs from the trainer in a controlled, seeded way.

An off-policy correction can only be compared with another under the same mismatch. This harness makes
one on purpose: rollouts are sampled by :class:`InjectedEngine` from a *behaviour copy* of the policy,
while the trainer computes its loss on the policy itself. Each setting is one kind of mismatch seen in
practice (docs/offpolicy.md):

    stale: k             the copy holds the weights of k updates ago (version v - k; fewer at the start)
    precision: bf16|fp16 the copy is cast to that dtype (a sampler in lower precision, trainer in fp32)
    noise: sigma         each floating-point tensor W of the copy gets sigma * rms(W) * N(0, 1), drawn
                         afresh every version from a generator seeded by (trainer.seed, version)
    temperature_skew: t  the copy samples at t * rollout.temperature; the trainer's log-probs keep
                         rollout.temperature (it does not know)

Applied in that order (stale weights, then noise, then the cast). Every completion carries the
behaviour log-prob of each sampled token (``Completion.logprobs``) under the distribution it was
actually drawn from: the inner engine's when it reports them, else one no-grad forward of the copy
(same temperature, top-k, top-p), so the corrections and the ``mismatch/*`` metrics always have them.

Held-out evaluation and the KL probe keep sampling from the trainer's policy: only the training
rollouts (``RunContext.engine``) go through the copy. The copy syncs from the policy whenever the
run loop hands the engine new weights (``update_policy``). With ``stale: k`` every checkpoint holds the
k older versions (``weight_history``, restored by ``load_history`` on resume), so a resumed run samples
exactly what the uninterrupted one does. The hf and native backends only.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import replace
from typing import Any

import torch

from reasoning_rl.settings.rollout import INJECT_PRECISIONS as PRECISION_NAMES
from reasoning_rl.settings.rollout import InjectConfig

INJECT_PRECISIONS = dict(zip(PRECISION_NAMES, (torch.bfloat16, torch.float16)))


def perturb_(params: dict[str, torch.Tensor], sigma: float, generator: torch.Generator) -> None:
    """W <- W + sigma * rms(W) * eps, eps ~ N(0, 1) from ``generator``, for each floating-point tensor
    (rms(W) = sqrt(mean(W^2)): the noise is relative to each tensor's scale). In place."""
    for w in params.values():
        if w.is_floating_point():
            rms = w.float().pow(2).mean().sqrt()
            eps = torch.randn(w.shape, generator=generator, dtype=torch.float32)
            w.add_((sigma * rms * eps).to(w.dtype))


def noise_seed(seed: int, version: int) -> int:
    """The seed of version ``version``'s noise: the same run and version always get the same weights."""
    return (seed * 1_000_003 + version) * 7_919 + 17


class InjectedEngine:
    """Samples training rollouts from a behaviour copy of the policy (module docstring)."""

    def __init__(self, engine: Any, model: Any, cfg: InjectConfig, seed: int = 0, micro_batch: int = 32) -> None:
        """``engine``: the trainer's hf or native engine over ``model``; a shallow copy of it samples from
        the behaviour copy of ``model`` (same settings, other weights)."""
        self.cfg, self.seed, self.tokenizer, self.micro_batch = cfg, seed, engine.tokenizer, micro_batch
        self.behaviour = copy.deepcopy(model)
        if cfg.precision is not None:
            self.behaviour.to(INJECT_PRECISIONS[cfg.precision])
        self.behaviour.requires_grad_(False)
        self.inner = copy.copy(engine)
        self.inner.model = self.behaviour
        self.history: deque[tuple[int, dict[str, torch.Tensor]]] = deque(maxlen=cfg.stale + 1)
        self.policy_version = 0

    def update_policy(self, model: Any, version: int) -> None:
        """The trainer's weights at ``version``: kept for ``stale``, then the copy is rebuilt from the
        oldest kept version (v - k), noised and cast."""
        self.history.append((version, {k: v.detach().clone() for k, v in model.state_dict().items()}))
        behaviour_version, weights = self.history[0]
        if self.cfg.noise:
            weights = {k: v.clone() for k, v in weights.items()}
            perturb_(weights, self.cfg.noise, torch.Generator().manual_seed(noise_seed(self.seed, version)))
        with torch.no_grad():
            for name, target in self.behaviour.state_dict().items():
                target.copy_(weights[name])  # casts to the copy's dtype
        self.policy_version = behaviour_version
        self.inner.update_policy(self.behaviour, behaviour_version)

    def weight_history(self) -> list[tuple[int, dict[str, torch.Tensor]]]:
        """The versions kept before the current one (the ``stale`` older ones, fewer at the start), oldest
        first, for a checkpoint; empty when ``stale`` is 0."""
        return list(self.history)[:-1]

    def load_history(self, history: list[tuple[int, dict[str, torch.Tensor]]]) -> None:
        """A resumed run's older versions (from :meth:`weight_history`), before the current one is handed in."""
        self.history.clear()
        for version, weights in history[-self.cfg.stale:] if self.cfg.stale else []:
            self.history.append((version, {k: v.detach().clone() for k, v in weights.items()}))

    def pop_metrics(self) -> dict[str, float]:
        return self.inner.pop_metrics()

    def close(self) -> None:
        """Nothing to release but the copy, which goes with this object (the stack closes the layer below)."""

    def generate(self, prompts: Any, n: int, sampling: Any, seed: int | None = None) -> list[list[Any]]:
        """``n`` completions per prompt from the behaviour copy, each with its behaviour log-probs."""
        skewed = replace(sampling, temperature=sampling.temperature * self.cfg.temperature_skew)
        groups = self.inner.generate(prompts, n, skewed, seed=seed)
        missing = [c for g in groups for c in g if c.logprobs is None or len(c.logprobs) != len(c.token_ids)]
        if missing and skewed.do_sample:
            self._fill_logprobs(missing, skewed)
        for g in groups:
            for c in g:
                c.policy_version = self.policy_version
        return groups

    @torch.no_grad()
    def _fill_logprobs(self, completions: list[Any], sampling: Any) -> None:
        """The copy's log-prob of each sampled token under the distribution it sampled (one forward)."""
        from reasoning_rl.policy.logprobs import frozen_logprobs

        rows = [c for c in completions if c.token_ids]
        if not rows:
            return
        was_training = self.behaviour.training
        self.behaviour.eval()
        try:
            logps = frozen_logprobs(self.behaviour, [c.prompt_token_ids for c in rows], [c.token_ids for c in rows],
                                    self.tokenizer.pad_token_id, sampling.temperature, self.micro_batch,
                                    top_k=sampling.top_k, top_p=sampling.top_p)
        finally:
            self.behaviour.train(was_training)
        for c, lp in zip(rows, logps):
            c.logprobs = lp.tolist()


def inject_engine(engine: Any, rollout: Any, model: Any, seed: int, micro_batch: int = 32) -> Any:
    """The engine of the training rollouts: ``engine`` itself, or an :class:`InjectedEngine` when
    ``rollout.inject`` makes a mismatch (the caller keeps ``engine`` for evaluation)."""
    cfg: InjectConfig = rollout.inject
    if not cfg.active():
        return engine
    problems = cfg.problems(rollout.backend)
    if problems:
        raise ValueError("; ".join(problems))
    return InjectedEngine(engine, model, cfg, seed=seed, micro_batch=micro_batch)
