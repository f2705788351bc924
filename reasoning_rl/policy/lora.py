"""LoRA through ``peft`` (``model.lora``): train low-rank adapters instead of the whole policy.

Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models" (arXiv 2106.09685): each target
linear layer ``W`` (frozen) gains a trainable ``B A`` of rank ``r``,

    h = W x + (alpha / r) * B A x          A: [r, in] (random), B: [out, r] (zeros: starts at W)

so the optimiser holds moments for ``r * (in + out)`` numbers per layer instead of ``in * out``.
The adapter is peft's (``get_peft_model`` with a ``LoraConfig``), nothing home-made. What the run
loop does with it:

- the reference policy of the KL term is the same modules with the adapter switched off
  (:class:`AdapterDisabled`, peft's ``disable_adapter``): no second copy of the model is held;
- a checkpoint holds the adapter (``adapter_model.safetensors``, ``adapter_config.json``) and
  ``base_model.json``, the ``model`` settings that rebuild the frozen base
  (:func:`reasoning_rl.policy.loading.load_pretrained` reads such a folder back);
- ``reasoning-rl-export <checkpoint> <out>`` merges it into a plain Hugging Face folder
  (``merge_and_unload``) that loads with ``AutoModelForCausalLM``;
- engines that hold their own copy of the weights (vLLM) get the merged weights
  (:func:`merged_state_dict`) after every step.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from reasoning_rl.errors import UserError
from reasoning_rl.settings.model import LoRAConfig

ADAPTER_CONFIG = "adapter_config.json"
"""The file peft's ``save_pretrained`` writes next to the adapter's weights: marks an adapter folder."""
BASE_MODEL_FILE = "base_model.json"
"""The ``model`` settings (``ModelConfig`` as a dict) of the frozen base an adapter checkpoint applies to."""
INSTALL = 'pip install ".[lora]"   (or: pip install "peft>=0.13")'


class PeftNotInstalledError(UserError, ImportError):
    """``model.lora.r > 0`` (or an adapter checkpoint) without the ``peft`` package."""


def require_peft(what: str) -> Any:
    """The ``peft`` module, or :class:`PeftNotInstalledError` saying how to install it."""
    try:
        import peft
    except ImportError as exc:
        raise PeftNotInstalledError(f"{what} needs the peft package, which is not installed: {INSTALL}") from exc
    return peft


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a peft-wrapped policy (its trainable parameters are adapters)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def wrap_lora(model: Any, cfg: LoRAConfig, base: dict[str, Any] | None = None) -> Any:
    """``model`` with peft's LoRA adapters on ``cfg.target_modules``; only the adapters are trainable.

    ``base`` (the ``model`` settings as a dict) is recorded so a checkpoint can name its frozen base."""
    peft = require_peft("model.lora.r > 0")
    config = peft.LoraConfig(task_type="CAUSAL_LM", r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                             target_modules=list(cfg.target_modules))
    try:
        wrapped = peft.get_peft_model(model, config)
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise UserError(f"model.lora.target_modules={list(cfg.target_modules)}: {str(exc).splitlines()[0]}; "
                        f"this model's linear layers are {names}") from exc
    if _checkpointing(model):
        # Reentrant checkpointing needs an input that requires grad; the embeddings are frozen now.
        wrapped.enable_input_require_grads()
    wrapped.reasoning_rl_base = dict(base or {})
    return wrapped


def _checkpointing(model: Any) -> bool:
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if isinstance(getattr(type(model), name, None), property):
            return bool(getattr(model, name))
    return False


def trainable_parameters(model: Any) -> tuple[int, int]:
    """(trainable, all) parameter counts: the adapter's share of the model."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


@contextlib.contextmanager
def adapter_disabled(model: Any) -> Iterator[None]:
    """The base model's forward inside the block (peft's ``disable_adapter``); a no-op for a plain model."""
    if is_lora(model):
        with model.disable_adapter():
            yield
    else:
        yield


class AdapterDisabled:
    """pi_ref of a LoRA run: the policy's own modules with the adapter switched off.

    Callable like a model (``forward`` runs inside peft's ``disable_adapter``), in eval mode for
    its own forward (it switches the policy to eval and back), and its ``parameters()`` are the
    policy's (the same tensors: memory accounting counts them once). No copy is held, so the KL
    term's reference costs no memory beyond its activations."""

    training = False

    def __init__(self, policy: Any) -> None:
        if not is_lora(policy):
            raise TypeError("AdapterDisabled needs a peft-wrapped policy (model.lora.r > 0)")
        self.policy = policy
        self.config = policy.config

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        was_training = self.policy.training
        self.policy.train(False)
        try:
            with self.policy.disable_adapter():
                return self.policy(*args, **kwargs)
        finally:
            self.policy.train(was_training)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self(*args, **kwargs)

    def get_base_model(self) -> Any:
        """The transformers model under the adapter (what a forward without the adapter computes with)."""
        return self.policy.get_base_model()

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        return self.policy.parameters(recurse)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return self.policy.named_parameters(*args, **kwargs)

    def eval(self) -> AdapterDisabled:
        return self

    def requires_grad_(self, requires_grad: bool = True) -> AdapterDisabled:
        return self  # the adapter is the policy's and stays trainable; the base is frozen already


def lora_problems(cfg: Any) -> list[str]:
    """What is wrong with ``model.lora`` itself (a ``TrainConfig``; config validation); what it cannot run
    with is in reasoning_rl.compat."""
    if cfg.model.lora.r > 0 and not cfg.model.lora.target_modules:
        return ["model.lora.target_modules is empty; name the linear layers to adapt (e.g. [q_proj, v_proj])"]
    return []


# -- merged weights --------------------------------------------------------------------------------------
def _lora_layers(model: Any) -> dict[str, Any]:
    """Base-model module name -> peft LoRA layer, for every adapted layer."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.get_base_model().named_modules() if isinstance(m, LoraLayer)}


@torch.no_grad()
def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The state dict of the plain model with the adapter merged in: ``W + (alpha / r) B A`` (peft's
    ``get_delta_weight``) under the base model's own names. New tensors; the policy is left as it is
    (peft's in-place ``merge_adapter`` / ``unmerge_adapter`` would drift the base weights by rounding)."""
    if not is_lora(model):
        return model.state_dict()
    layers = _lora_layers(model)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.get_base_model().state_dict().items():
        if ".lora_" in name:
            continue
        plain = name.replace(".base_layer.", ".")
        module = plain.rsplit(".", 1)[0]
        if plain.endswith(".weight") and module in layers:
            layer = layers[module]
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
        out[plain] = tensor
    return out


def save_merged(model: Any, folder: str | Path) -> None:
    """A plain Hugging Face folder of ``model`` (merged when it carries an adapter; the tokenizer is the caller's)."""
    if not is_lora(model):
        model.save_pretrained(folder)
        return
    base = model.get_base_model()
    base.save_pretrained(folder, state_dict=merged_state_dict(model))


def save_adapter(model: Any, folder: str | Path) -> None:
    """peft's adapter files and ``base_model.json`` (the settings of the frozen base) into ``folder``."""
    model.save_pretrained(folder)
    base = getattr(model, "reasoning_rl_base", None) or {}
    Path(folder, BASE_MODEL_FILE).write_text(json.dumps(base, indent=2, default=str) + "\n", encoding="utf-8")


def is_adapter_folder(folder: str | Path) -> bool:
    return Path(folder, ADAPTER_CONFIG).is_file()


def read_base_settings(folder: str | Path) -> dict[str, Any]:
    """The ``base_model.json`` of an adapter checkpoint; a folder without one names what is missing."""
    path = Path(folder, BASE_MODEL_FILE)
    if not path.is_file():
        raise UserError(f"{str(folder)!r} holds a LoRA adapter but no {BASE_MODEL_FILE} naming its base model; "
                        "it was not written by reasoning-rl-train: merge it with peft yourself, or load its base "
                        "and the adapter with peft.PeftModel.from_pretrained")
    return json.loads(path.read_text(encoding="utf-8"))
