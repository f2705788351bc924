"""The ``native`` sampling engine (``rollout.backend=native``): our own decode loop over the trainer's
model, the same distribution as transformers ``generate`` with less work per token (:class:`NativeEngine`);
on the lean runtime its forward is :class:`reasoning_rl.policy.lean.LeanDecoder`. What every engine
promises (versions, token ids, log-probs) is in :mod:`reasoning_rl.policy.engines`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from reasoning_rl.policy.hf_engine import BATCH_SEED_STRIDE, HFEngine, _left_pad
from reasoning_rl.policy.hf_forward import cache_argument
from reasoning_rl.policy.lean import LeanDecoder
from reasoning_rl.policy.lean.context_cache import CachedContext, ContextCache
from reasoning_rl.policy.lm_head import sampling_support
from reasoning_rl.policy.runtime import uses_lean
from reasoning_rl.policy.stopping import StopWatch
from reasoning_rl.rollouts.sampling import Completion, SamplingConfig, check_id_rows


class NativeEngine(HFEngine):
    """Our own decode loop over the same model (``rollout.backend=native``): same distribution as
    ``generate``, less work per token.

    The prompt is run once (prefill, with the positions of left-padded rows counted from each
    row's first real token, as ``generate`` does), then one forward per new token against the
    key/value cache. On the lean runtime (``model.runtime``, reasoning_rl.policy.runtime) that
    forward is :class:`reasoning_rl.policy.lean.LeanDecoder` (a few tensor ops per layer on the model's own parameters, a preallocated cache, RoPE's
    cos/sin for all positions computed once); on the hf runtime the model runs its own modules, with what
    ``generate`` re-does every step done once (one preallocated ``[B, P + T]`` attention mask,
    sliced per step; every step's position ids as one ``[B, T]`` tensor). Neither path has logits
    processors, stopping-criteria objects or per-step ``model_kwargs`` updates. Sampling is in
    the loop with ``generate``'s semantics (logits / T, the top-k then top-p support of
    :func:`reasoning_rl.policy.lm_head.sampling_support`, one draw from the renormalised softmax by
    :func:`inverse_cdf_sample`; greedy = argmax), and the loop stops as soon as every row has
    finished. Runs under ``torch.inference_mode``. ``lean=False`` forces the module path.

    A row finishes at EOS or, with ``sampling.stop`` (``stop_in_loop``, the default), once its text
    holds a stop string that no later token can move (:class:`reasoning_rl.policy.stopping.StopWatch`):
    a multi-turn episode's turn ends at one, and the rows that reached it no longer decode filler until
    the slowest row ends. The completions are the ones decoding on would give (the same tokens, text,
    log-probs and finish reasons, :func:`~reasoning_rl.rollouts.sampling.cut_at_stop` still cuts each row): a
    finished row keeps taking its random draw every step (padding replaces its token), so the other
    rows draw what they drew before; and a seeded call with stop strings seeds each of its batches
    (:meth:`_seed_batch`), so a batch that ends sooner changes no later batch. ``decode_steps`` and ``decoded_tokens`` count
    the work: forward steps after the prefill, and rows x positions sampled (filler included).
    Each drawn token's log-prob is read off the probabilities it was drawn from (a ``[B]`` gather
    and log per step; greedy: ``max z - logsumexp(z)``).

    On the lean runtime, :meth:`generate_from_ids` can carry a :class:`ContextCache` from one call
    to the next (:meth:`context_cache`): a multi-turn episode's next turn runs only the tokens
    appended since (reasoning_rl.policy.lean.context_cache).
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64, lean: bool = True,
                 stop_in_loop: bool = True) -> None:
        super().__init__(model, tokenizer, batch_size)
        self.lean = lean
        self.stop_in_loop = stop_in_loop
        self.decode_steps = 0  # forward steps after the prefill, every call
        self.decoded_tokens = 0  # rows x positions sampled, filler after a row finished included

    def _seed_batch(self, batch: int, seed: int | None, sampling: SamplingConfig) -> None:
        """With stop strings (``sampling.stop``): batch k >= 1 of a call seeded s draws from
        ``torch.manual_seed(s + k * BATCH_SEED_STRIDE)`` (batch 0 from ``s``, seeded by
        :meth:`_sampling_mode`), so how many steps an earlier batch ran does not change what a later
        batch samples, and the in-loop stop gives the completions of decoding on and cutting afterwards
        (``stop_in_loop`` on or off, the same draws). Without stop strings one stream runs through the
        batches, as before the in-loop stop existed: runs measured then (single-turn tasks such as
        ``code_synthetic``, the default run) sample the same tokens."""
        if batch and seed is not None and sampling.stop:
            torch.manual_seed(seed + batch * BATCH_SEED_STRIDE)

    def context_cache_refusal(self) -> str | None:
        """None when :meth:`generate_from_ids` can carry a :class:`ContextCache` between calls (the lean
        decoder runs the model); otherwise why each call recomputes its contexts, in words."""
        if not self.lean:
            return "the native engine was built with lean=False"
        if not uses_lean(self.model):
            return "the model runs on its own modules (model.runtime: docs/performance.md), not the lean decoder"
        rope = getattr(self.model.config, "rope_scaling", None) or {}
        if rope.get("rope_type", rope.get("type")) in ("dynamic", "longrope"):
            # Their cos/sin depend on the longest position of the call: keys computed in an earlier,
            # shorter call would differ from a recompute.
            return f"rope_type={rope.get('rope_type', rope.get('type'))} rescales with the context's length"
        return None

    def context_cache(self) -> ContextCache | None:
        """An empty :class:`ContextCache` for :meth:`generate_from_ids`; None where this engine cannot
        carry one (:meth:`context_cache_refusal` says why)."""
        return ContextCache() if self.context_cache_refusal() is None else None

    @torch.no_grad()
    def generate_from_ids(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                          seed: int | None = None, cache: ContextCache | None = None,
                          keys: Sequence[Any] | None = None) -> list[Completion]:
        """:meth:`HFEngine.generate_from_ids`, and with a ``cache`` (from :meth:`context_cache`) and one
        key per row (the same key for the same row in every call: an episode), each row continues
        from the keys and values ``cache`` holds for its key: only the tokens after them are run
        (reasoning_rl.policy.lean.context_cache). The rows are batched and the draw seeded as without
        a cache, so the tokens and log-probs are the same up to float rounding. Afterwards ``cache``
        holds this call's rows (context and kept tokens, but the last) and nothing else."""
        if cache is None or self.context_cache_refusal() is not None:
            if cache is not None:  # every context runs whole
                cache.prefilled_tokens += sum(map(len, prompt_ids))
            return super().generate_from_ids(prompt_ids, sampling, seed)
        if keys is None or len(keys) != len(prompt_ids):
            raise ValueError(f"generate_from_ids with a cache needs one key per row: {len(prompt_ids)} rows, "
                             f"{'no' if keys is None else len(keys)} keys")
        check_id_rows(prompt_ids)
        carried: dict[Any, CachedContext] = {}
        with self._sampling_mode(seed) as seed:
            flat: list[Completion] = []
            rows = self._rows_per_batch(1)
            for batch, start in enumerate(range(0, len(prompt_ids), rows)):
                self._seed_batch(batch, seed, sampling)
                flat.extend(self._continue_rows([list(p) for p in prompt_ids[start:start + rows]],
                                                list(keys[start:start + rows]), sampling, cache, carried))
        cache.replace(carried)
        return flat

    @torch.inference_mode()
    def _continue_rows(self, rows: list[list[int]], keys: list[Any], sampling: SamplingConfig,
                       cache: ContextCache, carried: dict[Any, CachedContext]) -> list[Completion]:
        """One batch of :meth:`generate_from_ids` with a cache: prefill (no row has a usable entry) or
        :meth:`LeanDecoder.extend`, decode, then each row's entry for the next call into ``carried``."""
        device = next(self.model.parameters()).device
        entries = [cache.usable(k, r, self.policy_version) for k, r in zip(keys, rows)]
        new = [r[len(e.ids):] if e is not None else r for e, r in zip(entries, rows)]
        input_ids, attention_mask = _left_pad(new, self.tokenizer.pad_token_id, device)  # [B, M]
        steps = sampling.max_new_tokens
        decoder = LeanDecoder(self.model, check=False)
        try:
            stepper = _LeanStepper(decoder, input_ids, attention_mask, steps,
                                   past=None if all(e is None for e in entries)
                                   else [None if e is None else e.kv for e in entries])
            tokens, logprobs = self._decode(stepper, len(rows), steps, self.tokenizer.eos_token_id,
                                            self.tokenizer.pad_token_id, sampling, input_ids)
            out = [self._finish(ids, lp, sampling, r) for ids, lp, r in zip(tokens.tolist(), logprobs.tolist(), rows)]
            for i, (key, r, c) in enumerate(zip(keys, rows, out)):
                kept = max(len(c.token_ids) - 1, 0)  # the last kept token was drawn, never run
                carried[key] = CachedContext(r + c.token_ids[:kept], decoder.context_kv(i, kept), self.policy_version)
        finally:
            decoder.release()
        cache.reused_tokens += sum(len(r) - len(x) for r, x in zip(rows, new))
        cache.prefilled_tokens += sum(len(x) for x in new)
        return out

    def _rows_per_batch(self, n: int) -> int:
        """``batch_size`` rounded down to whole groups of ``n`` (when it holds one): the lean
        decoder keeps one prompt cache per group (:func:`reasoning_rl.policy.lean.group_size`), and a
        batch that cuts a group in two would share none."""
        return self.batch_size // n * n if self.batch_size >= n else self.batch_size

    def _needs_eval_mode(self) -> bool:
        """Not for the lean decoder: it reads the weights and has no dropout in either mode, so
        the policy stays in training mode (switching costs a walk over every module)."""
        return not (self.lean and uses_lean(self.model))

    @torch.inference_mode()
    def _sample(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, sampling: SamplingConfig,
                generate_kwargs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        b, steps = input_ids.shape[0], sampling.max_new_tokens
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        decoder = LeanDecoder(self.model, check=False) if self.lean and uses_lean(self.model) else None
        stepper = (_LeanStepper(decoder, input_ids, attention_mask, steps) if decoder is not None
                   else _ModuleStepper(self.model, input_ids, attention_mask, steps))
        try:
            return self._decode(stepper, b, steps, eos, pad, sampling, input_ids)
        finally:
            if decoder is not None:
                decoder.release()

    def _decode(self, stepper: Any, b: int, steps: int, eos: int, pad: int, sampling: SamplingConfig,
                input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """New tokens ``[B, T]`` and their log-probs ``[B, T]`` under the distribution drawn from; a row
        that finished (EOS, or a settled stop string) holds ``pad`` after it."""
        out = torch.full((b, steps), pad, dtype=input_ids.dtype, device=input_ids.device)  # [B, T]
        logprobs = torch.zeros(b, steps, device=input_ids.device)  # [B, T]
        finished = torch.zeros(b, dtype=torch.bool, device=input_ids.device)
        watch = StopWatch.for_sampling(self.tokenizer, sampling.stop) if self.stop_in_loop else None
        logits = stepper.first_logits
        for t in range(steps):
            logits = logits.float()  # [B, V]
            if sampling.do_sample:
                if sampling.temperature != 1.0:
                    logits = logits / sampling.temperature
                if sampling.top_k or sampling.top_p < 1.0:
                    logits = logits.masked_fill(~sampling_support(logits, sampling.top_k, sampling.top_p),
                                                float("-inf"))
                probs = torch.softmax(logits, dim=-1)  # [B, V], 0 outside the support
                token = inverse_cdf_sample(probs)  # [B]
                logprobs[:, t] = probs.gather(1, token[:, None]).squeeze(1).log()  # log pi(token): the drawn one
            else:
                token = logits.argmax(dim=-1)  # [B]
                # log softmax(z)_argmax = max z - logsumexp(z): the temperature-1 distribution's
                logprobs[:, t] = logits.gather(1, token[:, None]).squeeze(1) - torch.logsumexp(logits, dim=-1)
            # A finished row drew too (inverse_cdf_sample: one number per row), so the others' draws stay.
            token = torch.where(finished, pad, token)
            out[:, t] = token
            finished |= token == eos
            if watch is not None:
                finished |= watch.settled(out[:, :t + 1], ~finished)
            if t + 1 == steps or bool(finished.all()):
                self.decode_steps += t
                self.decoded_tokens += b * (t + 1)
                return out[:, :t + 1], logprobs[:, :t + 1]
            logits = stepper.step(token)
        return out, logprobs


def inverse_cdf_sample(probs: torch.Tensor) -> torch.Tensor:
    """One draw per row of ``probs`` ``[B, V]``: the first token whose cumulative probability
    exceeds ``u * total``, ``u ~ U[0, 1)``, so token i is drawn with probability
    ``p_i / sum(p)`` (inverse-transform sampling). One uniform number per row, where
    ``torch.multinomial`` draws V exponentials: 17 us instead of 85 us for 32 x 82 on one CPU
    thread, every decode step. A token of probability 0 (outside the top-k / top-p set) adds
    nothing to the sum, so it is never the first to exceed ``u * total``; and ``u * total`` is
    below the total (``u <= 1 - 2^-24``: the product is at least half an ulp under it), so the
    search never runs past the last token.  # [B]"""
    cdf = probs.cumsum(dim=-1)  # [B, V], non-decreasing
    total = cdf[:, -1:]
    return torch.searchsorted(cdf, torch.rand_like(total) * total, right=True).squeeze(1)


class _LeanStepper:
    """Next-token logits from :class:`reasoning_rl.policy.lean.LeanDecoder`: the prompts prefilled, or
    with ``past`` (each row's cached keys and values, or None) the rest of each context run after them."""

    def __init__(self, decoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, steps: int,
                 past: list[torch.Tensor | None] | None = None) -> None:
        self.decoder = decoder
        self.first_logits = (self.decoder.prefill(input_ids, attention_mask, steps) if past is None
                             else self.decoder.extend(past, input_ids, attention_mask, steps))  # [B, V]

    def step(self, token: torch.Tensor) -> torch.Tensor:
        return self.decoder.step(token)


class _ModuleStepper:
    """Next-token logits from the model's own forward against its key/value cache."""

    def __init__(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, steps: int) -> None:
        b, p = input_ids.shape
        self.model, self.prompt_len, self.t = model, p, 0
        self.mask = torch.ones(b, p + steps, dtype=attention_mask.dtype, device=input_ids.device)  # [B, P+T]
        self.mask[:, :p] = attention_mask
        prompt_positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [B, P]
        self.new_positions = attention_mask.sum(-1, keepdim=True) + torch.arange(steps, device=input_ids.device)
        self.cache_key = cache_argument(model)
        self.out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=prompt_positions,
                         use_cache=True)
        self.first_logits = self.out.logits[:, -1, :]

    def step(self, token: torch.Tensor) -> torch.Tensor:
        out, t, p = self.out, self.t, self.prompt_len
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        self.out = self.model(input_ids=token[:, None], attention_mask=self.mask[:, :p + t + 1],
                              position_ids=self.new_positions[:, t:t + 1], use_cache=True,
                              **{self.cache_key: cache})
        self.t += 1
        return self.out.logits[:, -1, :]
