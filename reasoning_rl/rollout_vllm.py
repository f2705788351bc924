"""vLLM rollouts for training (``rollout=vllm``), colocated with the trainer on the same GPU.

One step, as the run loop drives it:

    generate      wake the engine (if asleep), sample n = G completions per prompt from token-id
                  prompts (the trainer's tokenisation), tag each with the policy version, put the
                  engine to sleep so the update has the GPU's memory
    measure       the trainer's log-probs of the same tokens (one no-grad forward) against the
                  engine's: ``rollout/logprob_mismatch_mean`` / ``_max`` (the loss never uses the
                  engine's log-probs: the algorithms recompute their own)
    update        the algorithm's optimiser steps (the engine sleeps)
    sync          ``update_policy(model, version)``: wake, load the new weights in place from the
                  trainer's tensors (no disk round-trip), reset the prefix cache; in a thread with a
                  deadline (``rollout.vllm_sync_timeout``): a sync that hangs stops the run with a
                  TimeoutError instead of hanging it

How the weights get in: vLLM's model classes take Hugging Face checkpoint names in
``model.load_weights(iterable of (name, tensor))`` and fuse q/k/v and gate/up themselves, so
:func:`vllm_weights` only strips what wrappers add to the names and drops what vLLM does not
hold. The model is reached as vLLM's V0 engine exposes it
(``llm.llm_engine.model_executor.driver_worker.model_runner.model``) or, on V1, through
``llm.collective_rpc`` with the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
set here unless already set) so the tensors are handed over, not pickled. Sleep mode
(``LLM.sleep(level)`` / ``wake_up()``) is used when ``rollout.vllm_sleep_mode`` is on.

vllm is imported lazily, in :meth:`VLLMRolloutEngine.colocated` only. Nothing here has been run on
a GPU with vLLM yet (docs/scaling.md); the CPU tests drive it with a fake ``LLM`` object.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from reasoning_rl import distributed
from reasoning_rl.rollout import Completion, SamplingConfig, _cut_at_stop, require_vllm

log = logging.getLogger(__name__)
T = TypeVar("T")

WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
"""Name parts added by DDP, torch.compile, FSDP and activation checkpointing wrappers (at the front)."""
INNER_WRAPPER_PARTS = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
"""The ones that can also sit inside a name (wrapped submodules); ``module.`` only counts at the front."""
SKIPPED_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")
"""Buffers that HF models may carry in their state_dict and vLLM computes itself."""


# -- weight names: the trainer's state_dict -> what vLLM's load_weights takes ---------------------

def vllm_weight_name(name: str) -> str:
    """A state_dict key without wrapper prefixes (``module.model.layers.0...`` -> ``model.layers.0...``)."""
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix):], True
    for part in INNER_WRAPPER_PARTS:
        name = name.replace(f".{part}", ".")
    return name


def vllm_weights(state_dict: Mapping[str, torch.Tensor],
                 tie_word_embeddings: bool = False) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs for vLLM's ``model.load_weights``: Hugging Face names (vLLM maps
    them onto its fused layers), wrapper prefixes stripped, rotary caches dropped, and
    ``lm_head.weight`` dropped when it is tied to the embeddings (vLLM shares the one tensor).
    Tensors are detached, not copied."""
    out = []
    for key, tensor in state_dict.items():
        name = vllm_weight_name(key)
        if name.endswith(SKIPPED_SUFFIXES) or (tie_word_embeddings and name == "lm_head.weight"):
            continue
        out.append((name, tensor.detach()))
    return out


# -- a call with a deadline --------------------------------------------------------------------------

def call_with_timeout(fn: Callable[[], T], timeout_s: float, what: str, setting: str) -> T:
    """``fn()`` in a daemon thread; its result, or its exception re-raised here, or a
    ``TimeoutError`` naming ``setting`` when it has not returned after ``timeout_s`` seconds.

    A thread cannot be killed: after a timeout it may still be running, so the caller must stop
    (the engine is in an unknown state), which the error says. A daemon thread does not keep the
    process alive at exit."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"reasoning-rl {what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not finish within {timeout_s:g} s ({setting}); the engine is in an "
                           f"unknown state, so the run stops. Raise {setting} for a large model, or check "
                           "that the GPU is not stuck or out of memory")
    if "error" in box:
        raise box["error"]
    return box["value"]


# -- the engine's and the trainer's log-probs of the same tokens -------------------------------------

def logprob_mismatch(engine: Sequence[Sequence[float]], trainer: Sequence[torch.Tensor]) -> dict[str, float]:
    """Per-token ``|log p_engine - log p_trainer|`` over every sampled token of the batch:
    mean and max (``rollout/logprob_mismatch_mean`` / ``_max``). 0 when the engine samples
    exactly the trainer's distribution; bf16 kernels typically give ~1e-2."""
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


# -- reaching vLLM's model -------------------------------------------------------------------------

def _load_on_worker(worker: Any, weights: list[tuple[str, torch.Tensor]]) -> int:
    """Runs inside a vLLM worker (``collective_rpc``): hand the weights to its model."""
    worker.model_runner.model.load_weights(weights=weights)
    return len(weights)


def weight_loader(llm: Any) -> Callable[[list[tuple[str, torch.Tensor]]], None]:
    """How to put weights into ``llm``'s model: V0's in-process model, else V1's ``collective_rpc``."""
    try:
        model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    except AttributeError:
        model = None
    if model is not None and hasattr(model, "load_weights"):
        return lambda weights: model.load_weights(weights)
    if hasattr(llm, "collective_rpc"):
        return lambda weights: llm.collective_rpc(_load_on_worker, args=(weights,))
    raise RuntimeError("cannot reach the vLLM engine's model to load weights (neither "
                       "llm_engine.model_executor.driver_worker.model_runner.model nor LLM.collective_rpc "
                       "exists in this vLLM version); use rollout.backend=hf")


class VLLMRolloutEngine:
    """Training rollouts with vLLM, the trainer's weights loaded in place after every step.

    Build it with :meth:`colocated` (starts vLLM) or directly around an ``llm`` object (tests pass
    a fake one, and a stand-in for ``vllm.SamplingParams`` as ``sampling_params``). ``trainer_model`` is the policy being trained: its weights are the ones synced,
    and its log-probs are compared with the engine's when ``check_logprobs`` is on."""

    SYNC_SETTING = "rollout.vllm_sync_timeout"

    def __init__(self, llm: Any, tokenizer: Any, trainer_model: Any, *, sync_timeout: float = 300.0,
                 sleep_mode: bool = False, sleep_level: int = 1, check_logprobs: bool = True,
                 micro_batch: int = 32, sampling_params: Callable[..., Any] | None = None) -> None:
        if sleep_level not in (1, 2):
            raise ValueError(f"rollout.vllm_sleep_level must be 1 or 2, got {sleep_level}")
        self.llm, self.tokenizer, self.trainer_model = llm, tokenizer, trainer_model
        self.sync_timeout, self.sleep_mode, self.sleep_level = sync_timeout, sleep_mode, sleep_level
        self.check_logprobs, self.micro_batch = check_logprobs, micro_batch
        self._sampling_params = sampling_params  # vllm.SamplingParams unless given (tests)
        self.policy_version = 0
        self.asleep = False
        self._load = weight_loader(llm)
        self._metrics: dict[str, float] = {}

    @classmethod
    def colocated(cls, model: Any, tokenizer: Any, rollout: Any, workdir: str | Path,
                  seed: int = 0) -> VLLMRolloutEngine:
        """Start vLLM on this process's GPU next to the trainer: ``rollout`` is the run's
        ``RolloutConfig`` (its ``vllm_*`` settings); the model's config and current weights are
        written once to ``workdir/rank-<r>`` for vLLM to start from."""
        require_vllm("rollout.backend=vllm")
        if not torch.cuda.is_available():
            raise RuntimeError("rollout.backend=vllm needs a CUDA GPU; this machine has none (use rollout=hf)")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core here: tensors handed over
        from vllm import LLM
        from vllm.engine.arg_utils import EngineArgs

        from reasoning_rl.atomic import atomic_directory_write

        folder = Path(workdir) / f"rank-{distributed.rank()}"
        atomic_directory_write(folder, lambda tmp: (model.save_pretrained(tmp), tokenizer.save_pretrained(tmp)))
        options: dict[str, Any] = dict(
            model=str(folder), dtype=rollout.vllm_dtype, gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
            enable_sleep_mode=rollout.vllm_sleep_mode, seed=distributed.rank_seed(seed),
            enforce_eager=rollout.vllm_enforce_eager,
        )
        if rollout.vllm_max_model_len:
            options["max_model_len"] = rollout.vllm_max_model_len
        accepted = {f.name for f in dataclasses.fields(EngineArgs)}
        if "logprobs_mode" in accepted:  # log-probs after temperature / top-k / top-p, as the trainer's
            options["logprobs_mode"] = "processed_logprobs"
        if distributed.is_distributed():  # one engine per torchrun rank, on that rank's GPU
            options["distributed_executor_backend"] = "external_launcher"
        llm = LLM(**options)
        return cls(llm, tokenizer, model, sync_timeout=rollout.vllm_sync_timeout, sleep_mode=rollout.vllm_sleep_mode,
                   sleep_level=rollout.vllm_sleep_level, check_logprobs=rollout.vllm_check_logprobs,
                   micro_batch=rollout.batch_size)

    # -- weights --------------------------------------------------------------------------------------
    def update_policy(self, model: Any, version: int) -> None:
        """Load ``model``'s current weights into the engine in place (``version`` RL steps done)."""
        t0 = time.perf_counter()
        self._wake()
        self._sync(model)
        self.policy_version = version
        self._metrics["time/weight_sync"] = time.perf_counter() - t0

    def _sync(self, model: Any) -> None:
        tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
        weights = vllm_weights(model.state_dict(), tie_word_embeddings=tied)

        def load() -> None:
            self._load(weights)
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
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if self._sampling_params is None:
            from vllm import SamplingParams

            self._sampling_params = SamplingParams
        params = self._sampling_params(**self.sampling_params(n, sampling, distributed.rank_seed(seed)))
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        self._wake()
        try:
            outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        finally:
            self._sleep()
        groups = [[self._completion(o, ids, sampling) for o in out.outputs] for out, ids in zip(outputs, prompt_ids)]
        if self.check_logprobs:
            self._metrics.update(self.measure_mismatch([c for g in groups for c in g], sampling))
        return groups

    def sampling_params(self, n: int, sampling: SamplingConfig, seed: int | None) -> dict[str, Any]:
        """vLLM ``SamplingParams`` keywords for the toolkit's sampling settings (greedy = temperature 0)."""
        greedy = not sampling.do_sample
        return dict(n=n, temperature=0.0 if greedy else sampling.temperature,
                    top_p=1.0 if greedy else sampling.top_p, top_k=-1 if greedy else (sampling.top_k or -1),
                    max_tokens=sampling.max_new_tokens, seed=seed, logprobs=0 if self.check_logprobs else None,
                    stop_token_ids=[self.tokenizer.eos_token_id], skip_special_tokens=True)

    def _completion(self, output: Any, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        ids = list(output.token_ids)
        logprobs = sampled_logprobs(output)
        reason = "length" if output.finish_reason == "length" else "stop"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if sampling.stop:  # cut like the HF engines: before the stop string, its tokens kept
            ids, text, stopped = _cut_at_stop(ids, text, sampling.stop, self.tokenizer)
            reason = "stop" if stopped else reason
            logprobs = None if logprobs is None else logprobs[: len(ids)]
        return Completion(text=text, token_ids=ids, finish_reason=reason, prompt_token_ids=list(prompt_ids),
                          policy_version=self.policy_version, logprobs=logprobs)

    def measure_mismatch(self, completions: Sequence[Completion], sampling: SamplingConfig) -> dict[str, float]:
        """The trainer's log-probs of the sampled tokens (temperature and top-k/top-p support as in the
        loss) against the engine's (:func:`logprob_mismatch`)."""
        from reasoning_rl.logprobs import frozen_logprobs
        from reasoning_rl.models import set_training

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
        """Sync time and log-prob mismatch measured since the last call."""
        out, self._metrics = self._metrics, {}
        return out

