"""The start-up equality check: the chosen runtime computes what transformers' modules compute.

On one small real batch (the first prompts of the run, G samples each of a few tokens drawn by
the run's own engine), three sets of per-token log-probs of the sampled tokens:

    module   log softmax(z)_y from ``model(input_ids).logits`` over full rows (the reference)
    runtime  :func:`reasoning_rl.policy.logprobs.completion_logprobs`, what the loss uses: on the
             lean runtime the lean forward, on hf the shared-prompt forward (each group's
             prompt once, its key/value cache repeated)
    sampler  the engine's own log-probs of the tokens it drew (``Completion.logprobs``: native,
             hf, vLLM), under the sampling distribution (temperature, top-k / top-p)

``policy/runtime_max_abs_diff = max |runtime - module|`` over the real completion tokens, at
temperature 1. Above :data:`TOLERANCES` for the weights' dtype the run stops with
:class:`RuntimeMismatchError` (what to do: ``model.runtime=hf``). The sampler's difference from the
module forward at the sampling temperature is reported beside it (the header and ``summary.json``),
not enforced: vLLM's kernels differ by design and its per-step mismatch is logged anyway
(``rollout/logprob_mismatch_*``).

The random streams are left as they were: the run samples the same rollouts with the check as
without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from reasoning_rl.batching import pack
from reasoning_rl.errors import UserError
from reasoning_rl.policy.lm_head import sampling_support
from reasoning_rl.policy.logprobs import completion_logprobs
from reasoning_rl.rollouts.sampling import RolloutEngine, SamplingConfig

TOLERANCES: dict[torch.dtype, float] = {torch.float32: 1e-3, torch.bfloat16: 1.0, torch.float16: 0.25}
"""Largest accepted ``max |runtime - module|`` (nats) by the weights' dtype, about 25x (float32)
and 3-6x (bfloat16, float16) the worst measured over 5 seeds x 8 rows x 8 sampled tokens
(docs/models.md, "The start-up equality check"): float32 differs by float rounding (1e-6 on
the tiny model, 4e-5 on SmolLM2-135M, lean and hf alike); bfloat16 and float16 round every
matmul output to 8 or 11 bits (SmolLM2-135M: 0.38 and 0.042 on lean, 0.29 and 0.031 on hf's
own shared-prompt forward). A real difference (a skipped bias, a wrong RoPE) moves log-probs by
nats, above every one of these."""


class RuntimeMismatchError(UserError, RuntimeError):
    """The chosen runtime's log-probs differ from transformers' modules beyond the dtype's tolerance."""


@dataclass(frozen=True)
class RuntimeCheck:
    """The start-up check's figures (``summary.json``'s ``policy_runtime``)."""

    max_abs_diff: float
    """max |runtime - module| log-prob over the batch's real completion tokens (temperature 1)."""
    tolerance: float
    """The largest difference accepted for the weights' dtype (:data:`TOLERANCES`)."""
    tokens: int
    """Completion tokens compared."""
    sampler_max_abs_diff: float | None
    """max |engine - module| log-prob at the sampling distribution, when the engine reports its own."""

    def describe(self) -> str:
        """One line for the run header."""
        line = (f"max |log-prob - transformers' modules| = {self.max_abs_diff:.2e} on {self.tokens} tokens "
                f"(tolerance {self.tolerance:g})")
        if self.sampler_max_abs_diff is not None:
            line += f"; the sampler's own log-probs: {self.sampler_max_abs_diff:.2e}"
        return line

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def tolerance_for(dtype: torch.dtype) -> float:
    """:data:`TOLERANCES` of ``dtype`` (float32's for a dtype not listed)."""
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def check_runtime(model: Any, tokenizer: Any, engine: RolloutEngine, prompts: Sequence[str],
                  sampling: SamplingConfig, group_size: int, seed: int, new_tokens: int = 4,
                  num_prompts: int = 2) -> RuntimeCheck:
    """Sample ``min(group_size, 4)`` completions of ``new_tokens`` tokens for each of the first
    ``num_prompts`` prompts with ``engine``, and compare the runtime's, the sampler's and the module
    forward's log-probs of them (module docstring). Raises :class:`RuntimeMismatchError` above the
    tolerance. Torch's random state is restored afterwards."""
    from reasoning_rl.policy.loading import set_training

    g = max(1, min(group_size, 4))
    short = replace(sampling, max_new_tokens=max(1, min(new_tokens, sampling.max_new_tokens)), stop=[])
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        groups = engine.generate(list(prompts[:num_prompts]), g, short, seed=seed)
    rows = [c for group in groups for c in group]
    eos = tokenizer.eos_token_id
    completions = [c.token_ids or [eos] for c in rows]  # an empty completion is scored as EOS, as in training
    batch = pack([c.prompt_token_ids for c in rows], completions, tokenizer.pad_token_id)
    batch = batch.to(next(model.parameters()).device)
    real = batch.completion_mask.bool()  # [B, L]
    was_training = model.training
    set_training(model, False)
    try:
        with torch.no_grad():
            module = _module_logits(model, batch)  # [B, L, V] float32
            runtime, _ = completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_start,
                                             group_size=g)  # [B, L]
    finally:
        set_training(model, was_training)
    tokens = batch.input_ids[:, batch.completion_start:]  # [B, L]
    reference = module.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [B, L]
    diff = float((runtime.float() - reference)[real].abs().max())
    sampler = _sampler_diff(rows, module, tokens, short)
    dtype = next(model.parameters()).dtype
    check = RuntimeCheck(max_abs_diff=diff, tolerance=tolerance_for(dtype), tokens=int(real.sum()),
                         sampler_max_abs_diff=sampler)
    if not diff <= check.tolerance:  # NaN fails too
        raise RuntimeMismatchError(
            f"the policy runtime's log-probs differ from transformers' modules by {diff:.3g} nats on the start-up "
            f"batch (tolerance {check.tolerance:g} for {str(dtype).removeprefix('torch.')}): it would train on "
            "another function than the model. Run with model.runtime=hf (with model.runtime=hf already: "
            "algo.shared_prompt_forward=false), and report the model (docs/models.md)")
    return check


def _module_logits(model: Any, batch: Any) -> torch.Tensor:
    """transformers' module forward over full rows: the logits that predict each completion
    token ``[B, L, V]``, in float32."""
    positions = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions,
                   use_cache=False).logits  # [B, P+L, V]
    return logits[:, batch.completion_start - 1:-1].float()  # position t predicts token t + 1


def _sampler_diff(rows: Sequence[Any], module: torch.Tensor, tokens: torch.Tensor,
                  sampling: SamplingConfig) -> float | None:
    """max |engine log-prob - module log-prob| under the sampling distribution, over the tokens the
    engine reported; None when it reports none (or sampled greedily)."""
    if not sampling.do_sample or not any(c.logprobs for c in rows):
        return None
    logits = module / sampling.temperature
    if sampling.top_k or sampling.top_p < 1.0:
        logits = logits.masked_fill(~sampling_support(logits, sampling.top_k, sampling.top_p), float("-inf"))
    reference = logits.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [B, L]
    worst = 0.0
    for i, c in enumerate(rows):
        for t, value in enumerate(c.logprobs or []):
            if t < reference.shape[1] and math.isfinite(value):
                worst = max(worst, abs(value - float(reference[i, t])))
    return worst
