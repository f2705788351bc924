"""The ``hf`` sampling engine: transformers ``generate`` on the trainer's own model (the base of
the rollout stack for ``rollout.backend=hf``, reasoning_rl.rollouts.stack). :class:`HFEngine` is also
the parent of the ``native`` engine (:mod:`reasoning_rl.policy.native_engine`), which shares its
batching, seeding and finishing of completions. What every engine promises (versions, token ids,
log-probs) is in :mod:`reasoning_rl.policy.engines`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from reasoning_rl.rollouts.sampling import Completion, SamplingConfig, check_id_rows, cut_at_stop

BATCH_SEED_STRIDE = 104_729
"""A prime: batch k of a native call seeded s draws from seed ``s + k * BATCH_SEED_STRIDE``."""


class HFEngine:
    """Batched sampling with ``model.generate`` (left padding, KV cache).

    Temperature, top-k and top-p are applied by transformers' own warpers, passed to ``generate``
    as logits processors followed by :class:`_SampledLogprobs`, which records each drawn token's
    log-prob under the processed scores; the model's own ``generation_config`` sampling defaults
    (a shipped ``top_k``, say) are overridden, so the distribution is the one ``sampling`` says."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.policy_version = 0
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; set tokenizer.pad_token (e.g. to the EOS token)")

    def update_policy(self, model: Any, version: int) -> None:
        """The trainer's weights changed (``version`` RL steps done). This engine samples from
        that very model object, so there is nothing to copy: only the version is recorded."""
        self.policy_version = version

    def pop_metrics(self) -> dict[str, float]:
        """Engine measurements since the last call, for the step's metrics (none here)."""
        return {}

    def close(self) -> None:
        """Nothing to release: the model is the trainer's (the rollout stack closes every layer)."""

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[str], n: int, sampling: SamplingConfig, seed: int | None = None
    ) -> list[list[Completion]]:
        """``n`` completions for each prompt, grouped per prompt, in prompt order."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        with self._sampling_mode(seed) as seed:
            flat: list[Completion] = []
            # Repeat each prompt n times so one padded batch holds whole groups.
            expanded = [p for p in prompts for _ in range(n)]
            rows = self._rows_per_batch(n)
            for batch, start in enumerate(range(0, len(expanded), rows)):
                self._seed_batch(batch, seed, sampling)
                flat.extend(self._generate_batch(expanded[start:start + rows], sampling))
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    @torch.no_grad()
    def generate_from_ids(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                          seed: int | None = None) -> list[Completion]:
        """One completion for each prompt given as token ids, in order: the continuation of a multi-turn
        episode (prompt, sampled turns and observations, as ids: nothing is decoded and re-encoded).
        Each call runs its contexts from the start (prefill); the native engine can carry the key/value
        cache from one call to the next instead (:meth:`NativeEngine.generate_from_ids`)."""
        check_id_rows(prompt_ids)
        with self._sampling_mode(seed) as seed:
            flat: list[Completion] = []
            rows = self._rows_per_batch(1)
            for batch, start in enumerate(range(0, len(prompt_ids), rows)):
                self._seed_batch(batch, seed, sampling)
                flat.extend(self._generate_id_rows([list(p) for p in prompt_ids[start:start + rows]], sampling))
        return flat

    @contextlib.contextmanager
    def _sampling_mode(self, seed: int | None) -> Iterator[int | None]:
        """Seed the draw and switch dropout off (when :meth:`_needs_eval_mode`) for one ``generate``;
        yields this rank's seed (None: unseeded)."""
        from reasoning_rl.distributed import rank_seed
        from reasoning_rl.policy.loading import set_training

        seed = rank_seed(seed)  # data-parallel ranks draw independent samples; rank 0 keeps ``seed``
        if seed is not None:
            torch.manual_seed(seed)
        was_training = self.model.training
        if self._needs_eval_mode():
            set_training(self.model, False)
        try:
            yield seed
        finally:
            set_training(self.model, was_training)

    def _needs_eval_mode(self) -> bool:
        """``generate`` runs the model's modules, whose dropout must be off while sampling."""
        return True

    def _seed_batch(self, batch: int, seed: int | None, sampling: SamplingConfig) -> None:
        """Before batch ``batch`` (0, 1, ...) of a call seeded ``seed``: nothing here, one random stream
        runs through the call's batches (:meth:`NativeEngine._seed_batch` seeds each when it stops rows
        at stop strings)."""

    def _rows_per_batch(self, n: int) -> int:
        """Rows of one ``generate`` call: ``batch_size``."""
        return self.batch_size

    def _generate_batch(self, prompts: list[str], sampling: SamplingConfig) -> list[Completion]:
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        # A batch holds whole groups (each prompt n times): tokenize each distinct prompt once.
        unique = list(dict.fromkeys(prompts))
        row_of = {p: i for i, p in enumerate(unique)}
        rows = torch.tensor([row_of[p] for p in prompts])
        enc = tok(unique, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
        unique_ids = [ids[mask.bool()].tolist() for ids, mask in zip(enc["input_ids"], enc["attention_mask"])]
        input_ids, attention_mask = enc["input_ids"][rows].to(device), enc["attention_mask"][rows].to(device)
        new_tokens, logprobs = self._sample(input_ids, attention_mask, sampling, self._generate_kwargs(sampling))
        return [self._finish(ids, lp, sampling, list(unique_ids[r]))
                for ids, lp, r in zip(new_tokens.tolist(), logprobs.tolist(), rows.tolist())]

    def _generate_id_rows(self, rows: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        """One completion per row of token ids, left-padded into one batch."""
        device = next(self.model.parameters()).device
        input_ids, attention_mask = _left_pad(rows, self.tokenizer.pad_token_id, device)  # [B, P]
        new_tokens, logprobs = self._sample(input_ids, attention_mask, sampling, self._generate_kwargs(sampling))
        return [self._finish(ids, lp, sampling, r) for ids, lp, r in zip(new_tokens.tolist(), logprobs.tolist(), rows)]

    def _generate_kwargs(self, sampling: SamplingConfig) -> dict[str, Any]:
        """``model.generate``'s keyword arguments for ``sampling`` (the warpers go in separately)."""
        tok = self.tokenizer
        kwargs: dict[str, Any] = dict(
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            do_sample=sampling.do_sample,
            # Each rank generates on its own. transformers turns synced_gpus on for an FSDP-managed
            # model in a process group, which all-reduces after every token: with rank 0 evaluating
            # alone that waits forever. Under FSDP the engine runs inside full_parameters
            # (reasoning_rl.distributed.FullParameterEngine), so no forward needs a collective.
            synced_gpus=False,
        )
        # The warpers go in as logits processors (before the recorder); generate's own are off
        # (greedy: none are used, and transformers warns about sampling flags it ignores).
        if sampling.do_sample:
            kwargs.update(temperature=1.0, top_p=1.0, top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        return kwargs

    def _sample(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, sampling: SamplingConfig,
                generate_kwargs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """New tokens ``[B, T]`` after the left-padded prompts (pad after a row's EOS) and their
        log-probs ``[B, T]`` under the distribution they were drawn from."""
        from transformers import (
            LogitsProcessorList,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        warpers: list[Any] = []
        if sampling.do_sample:  # transformers' order: temperature, top-k, top-p
            if sampling.temperature != 1.0:
                warpers.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_k:
                warpers.append(TopKLogitsWarper(top_k=sampling.top_k))
            if sampling.top_p < 1.0:
                warpers.append(TopPLogitsWarper(top_p=sampling.top_p))
        recorder = _SampledLogprobs()
        out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                  logits_processor=LogitsProcessorList([*warpers, recorder]), **generate_kwargs)
        new = out[:, input_ids.shape[1]:]
        return new, recorder.logprobs(new)

    def _finish(self, ids: list[int], logprobs: list[float], sampling: SamplingConfig,
                prompt_ids: list[int]) -> Completion:
        """A row of new tokens and their log-probs as a :class:`Completion`: cut after EOS (kept),
        cut at the first stop string (:func:`reasoning_rl.rollouts.sampling.cut_at_stop`). Only the filler after
        EOS is dropped: a row without EOS ran the whole length, so every one of its tokens was sampled
        (a sampled ``<pad>`` included) and reaches the trainer unchanged, as the sampler saw it."""
        eos = self.tokenizer.eos_token_id
        pairs = list(zip(ids, logprobs))
        if eos in ids:
            pairs, reason = pairs[: ids.index(eos) + 1], "stop"
        else:
            reason = "length"
        ids = [t for t, _ in pairs]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if sampling.stop:
            ids, text, stopped = cut_at_stop(ids, text, sampling.stop, self.tokenizer)
            reason = "stop" if stopped else reason
        return Completion(text=text, token_ids=ids, finish_reason=reason, prompt_token_ids=prompt_ids,
                          policy_version=self.policy_version, logprobs=[lp for _, lp in pairs[:len(ids)]])


def _left_pad(rows: list[list[int]], pad: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of token ids as one left-padded batch: ids and attention mask ``[B, P]`` on ``device``."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)  # [B, P]
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, P]
    for i, r in enumerate(rows):
        input_ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        attention_mask[i, width - len(r):] = 1
    return input_ids.to(device), attention_mask.to(device)


class _SampledLogprobs:
    """A logits processor that goes last: it keeps the processed scores' log-softmax ``[B, V]``
    of each step and, one step later (when ``input_ids`` ends with the token drawn from them),
    the drawn token's log-prob; :meth:`logprobs` adds the last step's. Changes no score."""

    def __init__(self) -> None:
        self._previous: torch.Tensor | None = None  # [B, V]
        self._steps: list[torch.Tensor] = []  # [B] each

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._previous is not None:
            self._steps.append(self._previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self._previous = scores.float().log_softmax(dim=-1)
        return scores

    def logprobs(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """``[B, T]`` log-probs of ``new_tokens`` ``[B, T]`` (0 where none was recorded)."""
        steps = list(self._steps)
        if self._previous is not None and new_tokens.shape[1] > len(steps):
            steps.append(self._previous.gather(1, new_tokens[:, len(steps):len(steps) + 1]).squeeze(1))
        out = torch.zeros(new_tokens.shape, dtype=torch.float32, device=new_tokens.device)
        if steps:
            out[:, :len(steps)] = torch.stack(steps, dim=1)[:, :new_tokens.shape[1]]
        return out

