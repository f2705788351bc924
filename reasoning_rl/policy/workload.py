"""What the memory planner (reasoning_rl.policy.planner) reads of a run: its :class:`Workload`, from a
``TrainConfig`` and the model's shape (:func:`workload_of`). The planner's formulas take a Workload, never
the config, so they can be checked on hand-made workloads (tests/reasoning_rl/policy/test_planner.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reasoning_rl.policy.hf_forward import HEAD_CLASSES
from reasoning_rl.policy.lm_head import resolve_chunk
from reasoning_rl.policy.loading import resolve_dtype
from reasoning_rl.policy.shapes import ModelShape


@dataclass(frozen=True)
class Workload:
    """The settings of a run the planner reads (from a TrainConfig, :func:`workload_of`)."""

    group_size: int
    prompts_per_step: int
    micro_batch_rows: int
    prompt_tokens: int
    completion_tokens: int
    reference: bool
    checkpointing: bool
    lm_head_chunk: int
    weight_bytes: int
    activation_bytes: int
    rollout_backend: str
    rollout_batch: int
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()
    pi_old: bool = False
    reference_weight_bytes: int = 0
    """Bytes per parameter of pi_ref (``model.reference_dtype``); 0 = as the policy's weights."""
    runtime: str = "lean"
    """lean (reasoning_rl.policy.lean) or hf (transformers' modules)."""
    hf_head_chunkable: bool = False
    """On the hf runtime, whether the chunked LM head applies to this model class
    (reasoning_rl.policy.hf_forward.HEAD_CLASSES, an LM head that is not a LoRA target); else full logits."""

    @property
    def chunked_head(self) -> bool:
        """Whether the training log-probs apply the LM head a chunk at a time (reasoning_rl.policy.logprobs)."""
        return bool(self.lm_head_chunk) and (self.runtime == "lean" or self.hf_head_chunkable)


def _lora(cfg: Any) -> tuple[int, tuple[str, ...]]:
    lora = cfg.model.lora
    return int(lora.r or 0), tuple(lora.target_modules)


def runtime_of_plan(cfg: Any, m: ModelShape, cpu: bool, lora: bool) -> str:
    """What ``model.runtime`` will resolve to (reasoning_rl.policy.runtime.decide_runtime), from the
    config: ``lean`` as asked; ``auto`` -> lean on a CPU for a Llama / Qwen2 model without an
    adapter, else hf."""
    requested = str(cfg.model.runtime)
    if requested == "lean":
        return "lean"
    lean_family = m.architecture in ("LlamaForCausalLM", "Qwen2ForCausalLM") and not lora
    return "lean" if requested == "auto" and cpu and lean_family else "hf"


def workload_of(cfg: Any, m: ModelShape, prompt_tokens: int, cpu: bool = True) -> Workload:
    """The planner's view of a TrainConfig. Precision: ``model.dtype`` is the storage dtype of
    weights, gradients and optimiser states; ``trainer.precision`` (bf16 / fp16 compute with fp32
    master weights, when the config has it) makes weights 4 bytes and activations 2."""
    a = cfg.algo
    g = max(1, a.samples_per_prompt())
    rows = a.micro_batch_size  # any row count, not rounded to whole groups (reasoning_rl.algo.batch.micro_batching)
    total = g * a.prompts_per_step
    storage = resolve_dtype(cfg.model.dtype).itemsize
    precision = str(cfg.trainer.precision)
    weight, act = (4, 2) if precision in ("bf16", "fp16", "bfloat16", "float16") else (storage, storage)
    rank, targets = _lora(cfg)
    ref_dtype = cfg.model.reference_dtype
    return Workload(
        group_size=g, prompts_per_step=a.prompts_per_step, micro_batch_rows=min(rows, total),
        prompt_tokens=prompt_tokens, completion_tokens=cfg.rollout.max_new_tokens,
        reference=a.uses_reference(), checkpointing=cfg.model.gradient_checkpointing,
        lm_head_chunk=resolve_chunk(cfg.model.lm_head_chunk, m.vocab), weight_bytes=weight, activation_bytes=act,
        rollout_backend=cfg.rollout.backend, rollout_batch=min(cfg.rollout.batch_size, total),
        lora_rank=rank, lora_targets=targets, pi_old=a.keeps_old_logprobs(),
        runtime=runtime_of_plan(cfg, m, cpu, rank > 0),
        hf_head_chunkable=m.architecture in HEAD_CLASSES and not (rank and "lm_head" in targets),
        reference_weight_bytes=resolve_dtype(ref_dtype).itemsize if ref_dtype else 0)
