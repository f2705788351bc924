"""Memory planner: the predicted peak memory of a training run, by component, from its config alone.

    reasoning-rl-bench plan model=qwen2.5-0.5b-instruct task=gsm8k algo.group_size=16 --device-gb 80

The model is built on the meta device (reasoning_rl.policy.shapes: no weights read). Symbols:
P parameters (P_t of them trained), D hidden, n layers, H / H_kv query / key-value heads of
width d, I the MLP's width, V the vocabulary; G completions per prompt, U prompts per
micro-batch, B = G U rows, p prompt tokens, c completion tokens, N = B (c - 1) completion
positions the layers run, S = p + c - 1 keys per row; w bytes per stored weight, a bytes per
activation element. The peak of a step is

    peak = base + weights + reference + optimiser + max(rollout, frozen log-probs, update)

with the gradients inside each phase (they live from the first backward until the next step's
``zero_grad(set_to_none=True)``, so through the rollout too). Each term is a function below
with its derivation. What is counted is live tensor bytes (what CUDA's allocator reports); on a
CPU, glibc's malloc keeps freed blocks resident (docs/models.md, "Measured: one GRPO
micro-batch"), so the measured RSS exceeds it unless large blocks are returned
(docs/memory.md has the measurements).

Modelled: the GRPO family (what the algorithm says of its settings: AlgoConfig.samples_per_prompt,
uses_reference, keeps_old_logprobs; the Workload of reasoning_rl.policy.workload), the lean training forward of Llama /
Qwen2 models and transformers' forward of the others, fp32 / bf16 storage, gradient checkpointing,
the chunked LM head (on both runtimes). LoRA and mixed
precision are read from ``model.lora`` / ``trainer.precision`` when the config has them. Not
modelled: PPO's critic, FSDP shards, vLLM's own process on a CPU.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from reasoning_rl.policy.precision import storage_rounding_warning
from reasoning_rl.policy.shapes import ModelShape, model_shape, shape_of
from reasoning_rl.policy.workload import Workload, workload_of

log = logging.getLogger(__name__)

GB = 1024 ** 3
PROMPT_SAMPLE = 512
""":func:`log_plan` measures the longest prompt among this many training examples."""
CPU_BASE_BYTES = int(0.46 * GB)
"""The training process's resident memory besides the tensors counted here: Python, torch,
transformers, Hydra, the task's data and tokenizer, the autograd and generate code paths.
Calibrated on this machine (torch 2.13 CPU build, transformers 5.25): the tiny default run's
peak RSS (0.49-0.50 GB, two steps) less its counted tensors (0.04 GB); docs/memory.md."""
CUDA_BASE_BYTES = int(0.5 * GB)
"""CUDA context and kernels on the GPU (not measured here: a common figure for an H100 context)."""
FULL_LOGITS_COPIES = 4
"""``lm_head_chunk=0``: ``[B, c, V]`` float copies at the forward peak: the logits (kept for
backward), and under no_grad for the entropy: softmax, its product with the logits, the masked
result (reasoning_rl.policy.logprobs.entropy_from_logits)."""


@dataclass
class Plan:
    """Predicted peak bytes by component, and whether it fits ``device_bytes``."""

    model: ModelShape
    workload: Workload
    components: dict[str, int]
    peak_bytes: int
    phase: str
    device: str
    device_bytes: int
    largest_micro_batch: int
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.device_bytes

    def summary(self) -> str:
        """One line for the run's header."""
        w = self.workload
        verdict = "fits" if self.fits else "DOES NOT FIT"
        return (f"memory plan: peak {self.peak_bytes / GB:.2f} GB ({self.phase}) of {self.device_bytes / GB:.1f} GB "
                f"{self.device}: {verdict}; micro-batch {w.micro_batch_rows} rows, largest that fits "
                f"{self.largest_micro_batch}")

    def table(self) -> str:
        rows = [f"| {k} | {v / GB:.3f} |" for k, v in self.components.items()]
        return "\n".join(["| component | GB |", "| --- | --- |", *rows,
                          f"| **peak ({self.phase})** | **{self.peak_bytes / GB:.3f}** |"])


# -- the terms ---------------------------------------------------------------------------------------

def trainable_parameters(m: ModelShape, w: Workload) -> int:
    """P_t: all P, or with LoRA of rank r on the target linears (in, out): sum r (in + out)
    (A is [r, in], B is [out, r]; the base stays frozen)."""
    if not w.lora_rank:
        return m.parameters
    return sum(w.lora_rank * (i + o) for name, i, o in m.linears if name.rsplit(".", 1)[-1] in w.lora_targets)


def weights_bytes(m: ModelShape, w: Workload) -> int:
    """P w, plus the adapter P_t w under LoRA. Tied embeddings count once."""
    return m.parameters * w.weight_bytes + (trainable_parameters(m, w) * w.weight_bytes if w.lora_rank else 0)


def reference_bytes(m: ModelShape, w: Workload) -> int:
    """pi_ref, a copy of the policy when beta > 0: P w (w of ``model.reference_dtype`` when set).
    With LoRA the reference is the base with the adapter disabled: no copy, 0."""
    return m.parameters * (w.reference_weight_bytes or w.weight_bytes) if w.reference and not w.lora_rank else 0


def gradient_bytes(m: ModelShape, w: Workload) -> int:
    """One gradient per trained parameter, in its dtype: P_t w."""
    return trainable_parameters(m, w) * w.weight_bytes


def optimizer_bytes(m: ModelShape, w: Workload) -> int:
    """AdamW's two moments per trained parameter in its dtype (torch's fused AdamW): 2 P_t w."""
    return 2 * trainable_parameters(m, w) * w.weight_bytes


def layer_floats(m: ModelShape, keys: int, queries: int, cpu: bool) -> int:
    """Elements one decoder layer keeps for the backward, per query position (the lean forward,
    reasoning_rl.policy.lean.decoder_layer, counted with saved-tensor hooks on SmolLM2's shape):

    * two RMSNorms: input, normalised output and the 2-D view the projections save: 3 D each, + 1
      (the reciprocal RMS) each  -> 6 D + 2;
    * the rotated queries: H d; the heads' output that W_o reads: H d;
    * scaled_dot_product_attention: its log-sum-exp, H; or on a CPU, when a head has at most
      1,024 scores (lean.MATMUL_ATTENTION_MAX_SCORES), the matmul path's softmax, H S;
    * keys and values of the S positions the query attends to, per row: 2 H_kv d S / queries;
    * the MLP: gate, silu(gate), up, their product: 4 I.

    Checked with saved-tensor hooks on SmolLM2-135M's shape (G = 8 x 2 prompts): p = 128, c = 256
    (SDPA) 25.99M elements a layer counted and predicted; p = c = 16 (matmul path) 1.780M both."""
    hd = m.heads * m.head_dim
    matmul = cpu and queries * keys <= 1024
    attention = m.heads * keys if matmul else m.heads
    kv = 2 * m.kv_heads * m.head_dim * keys // max(1, queries)
    return 6 * m.hidden + 2 + 2 * hd + attention + 4 * m.intermediate + kv


def hf_layer_floats(m: ModelShape, keys: int, queries: int) -> int:
    """:func:`layer_floats` for transformers' own decoder layer (the hf runtime, SDPA attention):
    the same norms, projections and MLP, but keys and values repeated to the H query heads
    (``repeat_kv``) and the float attention mask kept per layer: 6 D + 2 H d + 4 I + 2 H d S /
    queries + S. Counted with saved-tensor hooks on a small Llama (D 96, H 6, H_kv 2, I 200, G 4 x 2,
    p 64, c 128): 2.30M elements a layer, 2.31M predicted."""
    hd = m.heads * m.head_dim
    return 6 * m.hidden + 2 * hd + 4 * m.intermediate + 2 * hd * keys // max(1, queries) + keys


def lora_floats(m: ModelShape, w: Workload) -> int:
    """Per position and layer, LoRA keeps A's output (r elements) for each target linear's B."""
    if not w.lora_rank:
        return 0
    targets = {name.rsplit(".", 1)[-1] for name, _, _ in m.linears if name.rsplit(".", 1)[-1] in w.lora_targets}
    return w.lora_rank * len(targets)


def activation_bytes(m: ModelShape, w: Workload, rows: int, cpu: bool) -> int:
    """What the training forward of one micro-batch of ``rows`` rows keeps for the backward.

    Without checkpointing: every layer's :func:`layer_floats` for the N = rows (c - 1) completion
    positions and the U = rows / G prompts' p positions (each prompt runs once), plus the final
    norm and the real positions' hidden states for the LM head (3 D per completion position).
    With checkpointing: each layer's input (D per position) and each prompt's keys and values
    repeated for its G rows (2 H_kv d p per row), plus one layer recomputed in the backward."""
    c, p, g = w.completion_tokens, w.prompt_tokens, w.group_size
    prompts = max(1, rows // g)
    n = rows * max(1, c - 1)
    if w.runtime == "hf":
        return _hf_activation_floats(m, w, rows) * w.activation_bytes
    comp = layer_floats(m, p + c - 1, max(1, c - 1), cpu) + lora_floats(m, w)
    prompt = layer_floats(m, p, p, cpu) + lora_floats(m, w)
    one_layer = n * comp + prompts * p * prompt
    if w.checkpointing:
        kept = (n + prompts * p) * m.hidden + rows * 2 * m.kv_heads * m.head_dim * p
        per_step = m.layers * kept + one_layer
    else:
        per_step = m.layers * one_layer
    return (per_step + 3 * n * m.hidden) * w.activation_bytes


def _hf_activation_floats(m: ModelShape, w: Workload, rows: int) -> int:
    """The hf runtime: without checkpointing, each prompt once and the completions against its
    repeated cache (reasoning_rl.policy.hf_forward.shared_prompt_forward), :func:`hf_layer_floats`
    per position; with checkpointing, full rows (transformers keeps no cache then): D per
    position and layer, plus one layer of full rows recomputed."""
    c, p = w.completion_tokens, w.prompt_tokens
    extra = lora_floats(m, w)
    if w.checkpointing:
        full = rows * (p + c)
        return m.layers * full * m.hidden + full * (hf_layer_floats(m, p + c, p + c) + extra)
    n = rows * max(1, c - 1)
    one_layer = n * (hf_layer_floats(m, p + c - 1, max(1, c - 1)) + extra) + max(1, rows // w.group_size) * p * (
        hf_layer_floats(m, p, p) + extra)
    return m.layers * one_layer


def backward_extra_bytes(m: ModelShape, w: Workload, rows: int, cpu: bool) -> int:
    """The backward's working set above what the forward kept: the gradients of one layer's
    activations (about that layer's saved elements: each saved tensor's gradient is its size)."""
    c, p = w.completion_tokens, w.prompt_tokens
    n = rows * max(1, c - 1)
    if w.runtime == "hf":
        return n * hf_layer_floats(m, p + c - 1, max(1, c - 1)) * w.activation_bytes
    return n * layer_floats(m, p + c - 1, max(1, c - 1), cpu) * w.activation_bytes


def lm_head_bytes(m: ModelShape, w: Workload, rows: int) -> int:
    """The LM head's full-vocabulary tensors at their peak. Chunked (reasoning_rl.policy.lm_head):
    one chunk's float32 logits and probabilities, 2 x chunk x V x 4, plus the [V, D] float32
    gradient it accumulates in the backward. Full logits (chunk 0): FULL_LOGITS_COPIES x
    rows x c x V x 4."""
    if w.chunked_head:
        return 2 * min(w.lm_head_chunk, rows * w.completion_tokens) * m.vocab * 4 + m.vocab * m.hidden * 4
    return FULL_LOGITS_COPIES * rows * w.completion_tokens * m.vocab * 4


def kv_cache_bytes(m: ModelShape, w: Workload) -> int:
    """Sampling's key/value cache at the last new token: 2 n H_kv d a per cached position.
    hf (generate): every row caches p + c positions, rollout.batch_size rows at a time;
    native (the lean decoder): each prompt cached once (U p) and each row its c new tokens;
    vllm: 0 here (inside the engine's share, counted by :func:`estimate` on a GPU)."""
    if w.rollout_backend == "vllm":
        return 0
    per_position = 2 * m.layers * m.kv_heads * m.head_dim * w.activation_bytes
    rows = w.rollout_batch
    if w.rollout_backend == "native":
        return per_position * (max(1, rows // w.group_size) * w.prompt_tokens + rows * w.completion_tokens)
    return per_position * rows * (w.prompt_tokens + w.completion_tokens)


def frozen_forward_bytes(m: ModelShape, w: Workload, rows: int) -> int:
    """A no-grad forward of pi_ref or pi_old over one micro-batch: every layer's prompt keys and
    values repeated for the rows (2 n H_kv d p per row), one layer's working set (N (2 D + 3 I)),
    and one LM-head chunk (2 x chunk x V x 4) or, unchunked, the logits (2 rows c V x 4)."""
    n = rows * max(1, w.completion_tokens - 1)
    kv = m.layers * rows * 2 * m.kv_heads * m.head_dim * w.prompt_tokens
    work = n * (2 * m.hidden + 3 * m.intermediate)
    head = (2 * min(w.lm_head_chunk, n) if w.chunked_head else 2 * n) * m.vocab * 4
    return (kv + work) * w.activation_bytes + head


# -- putting it together -----------------------------------------------------------------------------

def peak(m: ModelShape, w: Workload, base: int, rows: int, cpu: bool) -> tuple[dict[str, int], int, str]:
    """Components, the peak and the phase it falls in, for micro-batches of ``rows`` rows.

    update = activations + max(LM head, backward working set) + gradients, where the gradients are
    the LM head's alone ([V, D]) with one micro-batch (the rest appear as the activations are
    freed) and all of them from the second micro-batch on (accumulated)."""
    grads = gradient_bytes(m, w)
    state = {"base (process / CUDA context)": base, "weights": weights_bytes(m, w),
             "reference": reference_bytes(m, w), "optimiser states": optimizer_bytes(m, w), "gradients": grads}
    acts = activation_bytes(m, w, rows, cpu)
    head = lm_head_bytes(m, w, rows)
    backward = backward_extra_bytes(m, w, rows, cpu)
    accumulating = rows < w.group_size * w.prompts_per_step
    head_grad = m.vocab * m.hidden * w.weight_bytes if not w.lora_rank else 0
    update = acts + max(head, backward) + (grads if accumulating else min(grads, head_grad))
    rollout = grads + kv_cache_bytes(m, w)
    frozen = grads + frozen_forward_bytes(m, w, rows) if (w.reference or w.pi_old) else 0
    phases = {"update": update, "rollout": rollout, "frozen log-probs": frozen}
    phase = max(phases, key=phases.__getitem__)
    components = {**state, f"activations ({rows} rows{', checkpointed' if w.checkpointing else ''})": acts,
                  "LM head" + (f" ({w.lm_head_chunk}-position chunk)" if w.chunked_head else " (full logits)"): head,
                  "backward working set": backward, "sampling KV cache": kv_cache_bytes(m, w),
                  "frozen forward (reference / pi_old)": frozen_forward_bytes(m, w, rows)}
    fixed = base + state["weights"] + state["reference"] + state["optimiser states"]
    return components, fixed + phases[phase], phase


def device_memory(cfg: Any, device_gb: float | None) -> tuple[str, int, bool]:
    """(name, bytes, is CPU) of the run's device: ``device_gb`` when given (a GPU of that size),
    else the CUDA device's total memory, else the machine's RAM."""
    if device_gb is not None:
        return f"device (--device-gb {device_gb:g})", int(device_gb * GB), False
    dev = cfg.model.device
    if dev != "cpu" and torch.cuda.is_available() and (dev == "auto" or dev.startswith("cuda")):
        props = torch.cuda.get_device_properties(torch.device("cuda" if dev == "auto" else dev))
        return f"CUDA memory ({props.name})", int(props.total_memory), False
    return "RAM", os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), True


def estimate(cfg: Any, device_gb: float | None = None, prompt_tokens: int = 256, config: Any | None = None) -> Plan:
    """The memory plan of a TrainConfig (``prompt_tokens``: the longest prompt, in tokens;
    ``config``: the model's config when it is already loaded, else read as reasoning_rl.policy.shapes says)."""
    m = shape_of(config, "the loaded model") if config is not None else model_shape(cfg.model)
    device, capacity, cpu = device_memory(cfg, device_gb)
    w = workload_of(cfg, m, prompt_tokens, cpu)
    base = CPU_BASE_BYTES if cpu else CUDA_BASE_BYTES
    notes = [f"model: {m.architecture}, {m.parameters / 1e6:.1f}M parameters (config: {m.source})"]
    reserved = 0
    if cfg.rollout.backend == "vllm":
        if cpu:
            notes.append("rollout.backend=vllm on a CPU: the engine's memory is not counted")
        else:  # vLLM takes its share of the GPU up front; the sampling KV cache lives inside it
            reserved = int(cfg.rollout.vllm_gpu_memory_utilization * capacity)
    components, total, phase = peak(m, w, base, w.micro_batch_rows, cpu)
    if reserved:
        components["vLLM's share (rollout.vllm_gpu_memory_utilization)"] = reserved
        total += reserved
    step = w.group_size if cfg.algo.shares_prompt_forward() and w.group_size > 1 else 1
    largest = max((rows for rows in range(step, w.group_size * w.prompts_per_step + 1, step)
                   if peak(m, w, base, rows, cpu)[1] + reserved <= capacity), default=0)
    if cfg.algo.name != "grpo":
        notes.append(f"algo.name={cfg.algo.name}: modelled as GRPO (a critic or other extra model is not counted)")
    return Plan(m, w, components, total, phase, device, capacity, largest, notes)


def log_plan(cfg: Any, model: Any, tokenizer: Any, prompts: list[str]) -> Plan:
    """The run header's memory line (:meth:`Plan.summary`), for the loaded policy and the longest of
    the first :data:`PROMPT_SAMPLE` training prompts; a warning when the peak exceeds the device
    (CUDA memory, or the RAM on a CPU), and one when the trained weights are stored in a precision that
    rounds the updates away (reasoning_rl.policy.precision.storage_rounding_warning)."""
    rounding = storage_rounding_warning(str(cfg.model.dtype), str(cfg.trainer.precision),
                                        float(cfg.algo.learning_rate))
    if rounding is not None and not cfg.model.lora.r:
        log.warning(rounding)
    sample = prompts[:PROMPT_SAMPLE]
    longest = max((len(ids) for ids in tokenizer(sample, add_special_tokens=False)["input_ids"]), default=1)
    plan = estimate(cfg, prompt_tokens=max(1, longest), config=model.config)
    log.info("%s (reasoning-rl-bench plan prints it by component)", plan.summary())
    if not plan.fits:
        log.warning("the memory plan's peak %.2f GB exceeds the %.1f GB of %s: lower algo.micro_batch_size "
                    "(%d rows fit), or turn on model.gradient_checkpointing / a smaller model.lm_head_chunk",
                    plan.peak_bytes / GB, plan.device_bytes / GB, plan.device, plan.largest_micro_batch)
    return plan
