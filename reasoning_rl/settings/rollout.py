"""``rollout``: how completions are sampled and scored; ``rollout.inject``: a mismatch made on purpose."""

from __future__ import annotations

from dataclasses import dataclass, field

INJECT_PRECISIONS = ("bf16", "fp16")
"""The lower precisions ``rollout.inject.precision`` may sample in (reasoning_rl.rollouts.inject maps them to dtypes)."""


@dataclass
class InjectConfig:
    """A mismatch between sampler and trainer made on purpose (reasoning_rl.rollouts.inject; all off by default)."""

    stale: int = 0
    """Sample with the weights of this many updates ago (0 = the current ones)."""
    precision: str | None = None
    """Sample with the policy cast to bf16 or fp16 while training in its own dtype (null = off)."""
    noise: float = 0.0
    """Sample from weights with seeded Gaussian noise of this relative scale (sigma * rms of each tensor; 0 = off)."""
    temperature_skew: float = 1.0
    """Sample at this times rollout.temperature, unknown to the trainer (1 = off)."""

    def active(self) -> bool:
        return bool(self.stale or self.precision or self.noise or self.temperature_skew != 1.0)

    def problems(self, backend: str) -> list[str]:
        """What cannot run (the numeric ranges are in reasoning_rl.config_checks; what cannot run together
        with injection, in the compatibility table, reasoning_rl.compat)."""
        out = []
        if self.precision is not None and self.precision not in INJECT_PRECISIONS:
            out.append(f"rollout.inject.precision={self.precision!r} is unknown; choose one of "
                       f"{', '.join(INJECT_PRECISIONS)} or null")
        if self.active() and backend == "vllm":
            out.append("rollout.inject samples from a copy of the policy with the hf or native engine; "
                       "set rollout.backend=hf or native (vLLM's own mismatch is measured without it)")
        return out


@dataclass
class RolloutConfig:
    """How completions are sampled and scored."""

    backend: str = "hf"
    """hf (transformers generate), native (our decode loop) or vllm (optional extra, GPU;
    reasoning_rl/policy/vllm.py, docs/scaling.md)."""
    temperature: float = 1.0
    """Sampling temperature (also applied to the training log-probs)."""
    top_p: float = 1.0
    """Nucleus sampling (1.0 = off)."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    max_new_tokens: int = 256
    """Longest completion in tokens."""
    batch_size: int = 64
    """Sequences per generate call."""
    stop: list[str] = field(default_factory=list)
    """Extra stop strings."""
    reward_timeout: float = 10.0
    """Hard wall-clock limit per verifier call, in seconds (the item is killed after it)."""
    reward_workers: int | None = None
    """Verifier worker processes (null = one per core; 0 = in-process, no timeout)."""
    vllm_gpu_memory_utilization: float = 0.3
    """backend=vllm: share of the GPU's memory vLLM may take (its weights + KV cache); the rest is the trainer's."""
    vllm_sleep_mode: bool | None = None
    """backend=vllm: put the engine to sleep while the trainer updates (frees its KV cache and, at
    level 1, moves its weights to CPU memory); woken before the weight sync and generation.
    null = where vLLM has sleep mode (CUDA: on; CPU: off, which the log says)."""
    vllm_sleep_level: int = 1
    """backend=vllm: 1 (weights kept in CPU memory) or 2 (weights dropped, reloaded from the trainer)."""
    vllm_sync_timeout: float = 300.0
    """backend=vllm: seconds a weight sync may take; longer stops the run with a TimeoutError."""
    vllm_dtype: str | None = None
    """backend=vllm: the engine's dtype (float32, bfloat16, ...); null = the trainer's. Both are logged."""
    vllm_max_model_len: int | None = None
    """backend=vllm: longest prompt + completion the engine plans its KV cache for (null = the model's)."""
    vllm_enforce_eager: bool = False
    """backend=vllm: no CUDA graphs (slower decoding, faster start, less memory)."""
    vllm_check_logprobs: bool = True
    """backend=vllm: compare the engine's log-probs of the sampled tokens with the trainer's every step
    (one extra no-grad forward): rollout/logprob_mismatch_mean and _max."""
    max_staleness: int = 0
    """Asynchronous rollouts: sample each step's batch in a generator process, with the weights of exactly
    max(0, step - k) updates, overlapping the trainer's update (reasoning_rl.rollouts.async_engine, docs/offpolicy.md;
    hf or native, grpo or ppo). 0 = the synchronous loop."""
    inject: InjectConfig = field(default_factory=InjectConfig)
    """A sampler/trainer mismatch made on purpose (stale weights, lower precision, weight noise, a hidden
    temperature) for comparing off-policy corrections (reasoning_rl.rollouts.inject, docs/offpolicy.md)."""
