"""The sampling engines on the trainer's own model: ``hf`` (transformers ``generate``,
:mod:`reasoning_rl.policy.hf_engine`) and ``native`` (our decode loop, on the lean runtime when
``model.runtime`` chose it, :mod:`reasoning_rl.policy.native_engine`). The vLLM
engines, which hold their own copy of the weights, are in :mod:`reasoning_rl.policy.vllm`;
:func:`make_engine` builds any of them from ``rollout.backend``. What a rollout is (the
settings, a completion, the engine protocol, stop strings) is :mod:`reasoning_rl.rollouts.sampling`.

Every engine knows the policy version it samples from (``policy_version``: the number of RL
steps whose update produced the weights) and tags each completion with it; the run loop calls
``update_policy(model, version)`` after every step. These engines sample from the trainer's own
model object, so for them that call only records the version.

Completions keep their token ids as sampled, so the trainer scores exactly the tokens the policy
produced (re-tokenising decoded text can change them). A completion that ended with EOS keeps the
EOS token: the policy learns to stop. Each completion also carries ``logprobs``: the log-prob of
each sampled token under the distribution it was drawn from, after temperature, top-k and top-p
(``log softmax(z / T)`` renormalised over the top-k / top-p support); under greedy decoding, the
log-prob under the temperature-1 distribution ``log softmax(z)`` of the argmax token. The loss
never uses them (the trainer recomputes its own); off-policy corrections and mismatch metrics
compare the two.
"""

from __future__ import annotations

from typing import Any

from reasoning_rl.policy.hf_engine import BATCH_SEED_STRIDE, HFEngine
from reasoning_rl.policy.native_engine import NativeEngine, inverse_cdf_sample
from reasoning_rl.rollouts.sampling import RolloutEngine

__all__ = ["BATCH_SEED_STRIDE", "HFEngine", "NativeEngine", "inverse_cdf_sample", "make_engine"]


def make_engine(backend: str, model: Any, tokenizer: Any, batch_size: int = 64, rollout: Any = None,
                workdir: Any = None, seed: int = 0) -> RolloutEngine:
    """Training rollout engine for an in-memory policy: ``hf`` (transformers generate),
    ``native`` (:class:`NativeEngine`, our decode loop: same distribution, less per-token work) or
    ``vllm`` (:class:`reasoning_rl.policy.vllm.VLLMRolloutEngine`, colocated on the trainer's GPU,
    built from ``rollout``'s ``vllm_*`` settings; ``workdir`` holds the config it starts from)."""
    if backend == "hf":
        return HFEngine(model, tokenizer, batch_size=batch_size)
    if backend == "native":
        return NativeEngine(model, tokenizer, batch_size=batch_size)
    if backend == "vllm":
        from reasoning_rl.policy.vllm import VLLMRolloutEngine

        if rollout is None or workdir is None:
            raise ValueError("rollout.backend=vllm needs the rollout settings and a work folder")
        return VLLMRolloutEngine.colocated(model, tokenizer, rollout, workdir, seed=seed)
    raise ValueError(f"unknown rollout backend {backend!r}; expected 'hf', 'native' or 'vllm'")
