"""Sampling with a vLLM ``LLM`` behind the :class:`reasoning_rl.rollouts.sampling.RolloutEngine` protocol, and the
evaluation engine that loads a checkpoint (reasoning_rl.policy.vllm)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from reasoning_rl import distributed
from reasoning_rl.policy.vllm.availability import require_vllm
from reasoning_rl.policy.vllm.platform import current_platform, engine_options, prefix_caching, start_llm
from reasoning_rl.rollouts.sampling import Completion, SamplingConfig, check_id_rows, cut_at_stop

log = logging.getLogger(__name__)

SEED_BITS = 62
"""Bits of a per-prompt seed: vLLM seeds a request's n samples ``seed .. seed + n - 1``, which stays
below 2**63 (a torch generator's seed) for any n."""


# -- seeds -------------------------------------------------------------------------------------------

def prompt_seed(seed: int | None, index: int) -> int | None:
    """The seed of the ``index``-th prompt of a call seeded ``seed``: the first 62 bits of
    blake2b(``"seed:index"``), so equal prompts at different positions get different groups, the
    same call gives the same samples, and the ranges ``s .. s + n - 1`` vLLM uses for a prompt's
    n samples do not meet another prompt's (two ranges of n meet with probability ~2n / 2**62).
    None (unseeded) stays None."""
    if seed is None:
        return None
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - SEED_BITS)


# -- the engine's and the trainer's log-probs of the same tokens -------------------------------------

def logprob_mismatch(engine: Sequence[Sequence[float]], trainer: Sequence[torch.Tensor]) -> dict[str, float]:
    """Per-token ``|log p_engine - log p_trainer|`` over every sampled token of the batch:
    mean and max (``rollout/logprob_mismatch_mean`` / ``_max``). 0 when the engine samples
    exactly the trainer's distribution; fp32 on the CPU ~1e-6, bf16 kernels ~1e-2."""
    diffs = [torch.as_tensor(list(e), dtype=torch.float64) - t.double() for e, t in zip(engine, trainer) if len(e)]
    if not diffs:
        return {}
    d = torch.cat(diffs).abs()
    return {"rollout/logprob_mismatch_mean": float(d.mean()), "rollout/logprob_mismatch_max": float(d.max())}


def sampled_logprobs(output: Any) -> list[float] | None:
    """The log-prob of each sampled token from a vLLM ``CompletionOutput`` asked for ``logprobs=0``
    (one dict per position, keyed by token id, holding at least the sampled token)."""
    if getattr(output, "logprobs", None) is None:
        return None
    return [float(pos[tok].logprob) for tok, pos in zip(output.token_ids, output.logprobs)]


class VLLMSampler:
    """``generate(prompts, n, sampling, seed)`` over a vLLM ``LLM`` (the
    :class:`reasoning_rl.rollouts.sampling.RolloutEngine` protocol): prompts tokenized by ``tokenizer``
    without special tokens (as the HF engines do) and sent as token ids, each prompt its own
    request with its own seed (:func:`prompt_seed`), stop strings cut as the HF engines cut them.
    ``generate_from_ids(rows, sampling, seed)`` continues rows given as token ids (multi-turn
    episodes): the ids go to vLLM as they are, never decoded and re-encoded.

    ``sampling_params`` builds vLLM's ``SamplingParams`` (tests pass a stand-in)."""

    policy_version: int | None = None

    def __init__(self, llm: Any, tokenizer: Any, *, logprobs: bool = False,
                 sampling_params: Callable[..., Any] | None = None) -> None:
        self.llm, self.tokenizer, self.logprobs = llm, tokenizer, logprobs
        self._sampling_params = sampling_params
        self.prompt_tokens = 0
        """Prompt tokens of every request so far; with :attr:`cached_tokens`, the prefix cache's reuse."""
        self.cached_tokens = 0
        """Of those, the ones whose keys/values vLLM's prefix cache held (not recomputed)."""

    def sampling_params(self, n: int, sampling: SamplingConfig, seed: int | None) -> dict[str, Any]:
        """vLLM ``SamplingParams`` keywords for the toolkit's sampling settings (greedy = temperature 0)."""
        greedy = not sampling.do_sample
        return dict(n=n, temperature=0.0 if greedy else sampling.temperature,
                    top_p=1.0 if greedy else sampling.top_p, top_k=-1 if greedy else (sampling.top_k or -1),
                    max_tokens=sampling.max_new_tokens, seed=seed, logprobs=0 if self.logprobs else None,
                    stop_token_ids=[self.tokenizer.eos_token_id], skip_special_tokens=True,
                    # vLLM ends a request at a stop string (no tokens drawn past it; the ones before
                    # are the same draws); where to cut is still cut_at_stop's (_completion).
                    stop=[s for s in sampling.stop if s] or None)

    def _params(self, n: int, sampling: SamplingConfig, seed: int | None, count: int) -> list[Any]:
        if self._sampling_params is None:
            from vllm import SamplingParams

            self._sampling_params = SamplingParams
        seed = distributed.rank_seed(seed)  # data-parallel ranks draw independent samples
        return [self._sampling_params(**self.sampling_params(n, sampling, prompt_seed(seed, i)))
                for i in range(count)]

    def _sample(self, prompts: Sequence[str], n: int, sampling: SamplingConfig,
                seed: int | None) -> list[list[Completion]]:
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        return self._sample_ids(prompt_ids, n, sampling, seed)

    def _sample_ids(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingConfig,
                    seed: int | None) -> list[list[Completion]]:
        """``n`` completions of each row of token ids, row ``i`` seeded ``prompt_seed(seed, i)``."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        rows = [[int(t) for t in ids] for ids in prompt_ids]
        params = self._params(n, sampling, seed, len(rows))
        # vLLM's TokensPrompt: the ids are the prompt, vLLM does not tokenize anything.
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in rows], params, use_tqdm=False)
        for out, ids in zip(outputs, rows):
            self.prompt_tokens += len(ids)
            self.cached_tokens += getattr(out, "num_cached_tokens", None) or 0
        return [[self._completion(o, ids, sampling) for o in out.outputs] for out, ids in zip(outputs, rows)]

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingConfig,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions for each prompt, grouped per prompt, in prompt order."""
        return self._sample(prompts, n, sampling, seed)

    def generate_from_ids(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                          seed: int | None = None) -> list[Completion]:
        """One completion for each row of token ids, in order: the continuation of a multi-turn
        episode (prompt, sampled turns and observations). The ids reach vLLM unchanged (decoding
        and re-encoding would change them); row ``i`` is seeded as ``generate`` seeds its ``i``-th
        prompt. Where vLLM's prefix cache is on, the context's whole cache blocks computed by an
        earlier turn are read back, not recomputed (:attr:`cached_tokens`)."""
        check_id_rows(prompt_ids)
        return [group[0] for group in self._sample_ids(prompt_ids, 1, sampling, seed)]

    def context_cache_refusal(self) -> str:
        """Why an episode's turns carry no cache object here (reasoning_rl.envs.episode): vLLM keeps
        its own, the prefix cache, which an episode's next turn reuses where it is on."""
        cache = prefix_caching(self.llm)
        if cache["prefix_caching"]:
            return ("vLLM keeps no cache per episode; its prefix cache reads each context's whole blocks of "
                    f"{cache['block_size']} tokens back instead of recomputing them")
        return "vLLM keeps no cache per episode, and its prefix cache is off"

    def _completion(self, output: Any, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        ids = list(output.token_ids)
        logprobs = sampled_logprobs(output)
        reason = "length" if output.finish_reason == "length" else "stop"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if sampling.stop:  # cut like the HF engines: before the stop string, its tokens kept
            ids, text, stopped = cut_at_stop(ids, text, sampling.stop, self.tokenizer)
            reason = "stop" if stopped else reason
            logprobs = None if logprobs is None else logprobs[: len(ids)]
        return Completion(text=text, token_ids=ids, finish_reason=reason, prompt_token_ids=list(prompt_ids),
                          policy_version=self.policy_version, logprobs=logprobs)


class VLLMCheckpointEngine(VLLMSampler):
    """Evaluation's vLLM engine (``reasoning-rl-eval backend=vllm``): weights from a checkpoint
    folder or hub name, in ``dtype`` (the evaluation's ``dtype``, float32 by default, as the hf
    backend: greedy completions then equal the hf backend's), the tokenizer the hf backend loads."""

    def __init__(self, name_or_path: str, dtype: str = "float32", seed: int = 0,
                 max_model_len: int | None = None, **llm_options: Any) -> None:
        require_vllm("backend=vllm")
        from transformers import AutoConfig

        from reasoning_rl.policy.loading import load_tokenizer

        platform = current_platform()
        model_max_len = getattr(AutoConfig.from_pretrained(name_or_path), "max_position_embeddings", 2048)
        options = engine_options(name_or_path, dtype=dtype, seed=seed, platform=platform,
                                 max_model_len=max_model_len, model_max_len=model_max_len, **llm_options)
        llm = start_llm(options)
        cache = prefix_caching(llm)
        log.info("[vllm] evaluation engine on %s, dtype %s; prefix caching %s (blocks of %s tokens)",
                 platform.device, dtype, "on" if cache["prefix_caching"] else "off", cache["block_size"])
        super().__init__(llm, load_tokenizer(name_or_path))
