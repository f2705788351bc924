"""A policy's tensor shapes from its config alone, for the memory planner (reasoning_rl.policy.planner).

No weights are read: the model is built on PyTorch's ``meta`` device from its config (tensors
with shapes and dtypes, no storage), so a 1.5B-parameter model is counted in a second with no
memory. Where the config comes from, in order:

* ``model.name_or_path=tiny``: the built-in model's config (``model.tiny``);
* a packaged GGUF model (``model.gguf.package``): its converted folder's ``config.json`` when it
  has been converted, else :data:`KNOWN_CONFIGS`;
* a local folder: its ``config.json``;
* a hub name: the HF cache's config (``local_files_only``); else :data:`KNOWN_CONFIGS` when the name is
  in it (its numbers are the published configs', and asking an unreachable hub costs ~24 s of
  retries); else the hub, and when the hub cannot be reached, an error naming what to pass. The
  source is said in :attr:`ModelShape.source`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reasoning_rl.errors import UserError

KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-0.5B-Instruct": {
        "model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 32768},
    "Qwen/Qwen2.5-Math-1.5B": {
        "model_type": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12,
        "num_key_value_heads": 2, "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 4096},
    "smollm2-135m-instruct": {
        "model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
        "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
        "max_position_embeddings": 8192},
}
"""Shape-setting values of the shipped presets' ``config.json`` files (Qwen2.5-0.5B-Instruct,
Qwen2.5-Math-1.5B from their hub pages; SmolLM2-135M-Instruct as converted from its GGUF file),
used only when the real config cannot be read (no network, nothing cached): a plan made from them
says so. Qwen2.5's query/key/value projections carry biases (``attention_bias`` is implied by
the qwen2 model type)."""


class ModelShapeError(UserError, ValueError):
    """The planner found no config for ``model.name_or_path`` (no folder, hub unreachable, not in the table)."""


@dataclass(frozen=True)
class ModelShape:
    """What the memory formulas read from a model config."""

    architecture: str
    """The model class (``LlamaForCausalLM``...)."""
    parameters: int
    """Distinct parameters (tied input and output embeddings count once)."""
    hidden: int
    """D, the residual stream's width."""
    layers: int
    """Decoder layers."""
    heads: int
    """H, query heads."""
    kv_heads: int
    """H_kv, key/value heads (grouped-query attention when < H)."""
    head_dim: int
    """d, the width of one head."""
    intermediate: int
    """I, the MLP's width."""
    vocab: int
    """V, the vocabulary (the LM head's rows)."""
    tied: bool
    """Whether the LM head shares the input embedding's matrix."""
    source: str
    """Where the config came from (a file, the hub, or the built-in table)."""
    linears: tuple[tuple[str, int, int], ...] = ()
    """(module name, in features, out features) of every ``nn.Linear`` in the decoder layers, for LoRA."""


def shape_of(config: Any, source: str) -> ModelShape:
    """Build the model of ``config`` on the meta device (no storage) and read its shapes."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    text = config.get_text_config()
    unique = {id(p): p.numel() for p in model.parameters()}
    linears = tuple((name, m.in_features, m.out_features) for name, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear) and ".layers." in f".{name}")
    heads = text.num_attention_heads
    return ModelShape(
        architecture=type(model).__name__, parameters=sum(unique.values()), hidden=text.hidden_size,
        layers=text.num_hidden_layers, heads=heads, kv_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads, intermediate=text.intermediate_size,
        vocab=text.vocab_size, tied=bool(getattr(text, "tie_word_embeddings", False)), source=source,
        linears=linears)


def model_shape(model_cfg: Any) -> ModelShape:
    """The shapes of ``model_cfg``'s model (a ``reasoning_rl.policy.loading.ModelConfig``), from
    its config only (module docstring for where the config comes from)."""
    from transformers import AutoConfig

    from reasoning_rl.policy.loading import build_char_tokenizer
    from reasoning_rl.settings.model import TINY

    name = model_cfg.name_or_path
    if name == TINY:
        from transformers import LlamaConfig, Qwen2Config

        t = model_cfg.tiny
        cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}.get(t.arch, LlamaConfig)
        config = cls(vocab_size=len(build_char_tokenizer()), hidden_size=t.hidden_size,
                     num_hidden_layers=t.num_layers, num_attention_heads=t.num_heads, num_key_value_heads=t.num_heads,
                     intermediate_size=t.intermediate_size, max_position_embeddings=t.max_position_embeddings,
                     tie_word_embeddings=True)
        return shape_of(config, "model.tiny")
    if getattr(model_cfg.gguf, "package", None):
        folder = Path(model_cfg.gguf.cache_dir).expanduser() / name
        if (folder / "config.json").exists():
            return shape_of(AutoConfig.from_pretrained(folder), f"{folder}/config.json")
        return _known(name, f"not converted yet ({folder} has no config.json)")
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelShapeError(f"{path} holds no config.json; pass a folder written by save_pretrained")
        return shape_of(AutoConfig.from_pretrained(path), f"{path}/config.json")
    try:  # the HF cache first: no network, no retries
        return shape_of(AutoConfig.from_pretrained(name, trust_remote_code=model_cfg.trust_remote_code,
                                                   local_files_only=True), f"the HF cache's config of {name}")
    except (OSError, ValueError):
        pass
    if name in KNOWN_CONFIGS:  # exact for the shapes; the hub would cost ~24 s of retries when offline
        return _known(name, "not in the HF cache")
    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=model_cfg.trust_remote_code)
    except (OSError, ValueError) as exc:
        return _known(name, f"the hub is unreachable ({type(exc).__name__})")
    return shape_of(config, f"the hub's config of {name}")


def _known(name: str, why: str) -> ModelShape:
    from transformers import AutoConfig

    values = KNOWN_CONFIGS.get(name)
    if values is None:
        raise ModelShapeError(f"cannot read the config of {name!r}: {why}, and it is not in the planner's table "
                              f"({', '.join(KNOWN_CONFIGS)}); pass a local folder holding its config.json")
    config = AutoConfig.for_model(**values)
    return shape_of(config, f"the planner's built-in table (reasoning_rl.policy.shapes.KNOWN_CONFIGS): {why}")
