"""Policy models: any Hugging Face causal LM, or the built-in tiny model that needs no download.

The tiny family is a small Llama- or Qwen2-style decoder with a character-level
tokenizer built locally with the `tokenizers` library (one token per character,
plus ``<pad>``, ``<bos>``, ``<eos>``, ``<unk>``), wrapped as a
``PreTrainedTokenizerFast`` with a chat template. It goes through exactly the same
``AutoModelForCausalLM`` / ``save_pretrained`` / ``from_pretrained`` paths as a real
model such as Qwen2.5-0.5B-Instruct, so a test on it exercises the real code.
"""

from __future__ import annotations

import logging
import string
from pathlib import Path
from typing import Any

import torch

from reasoning_rl.hub import first_line, hub_unreachable
from reasoning_rl.policy.gguf_cache import ModelNotAvailableError, converted_folder
from reasoning_rl.policy.lm_head import describe_chunk, resolve_chunk, set_chunk
from reasoning_rl.policy.lora import is_adapter_folder, read_base_settings, trainable_parameters, wrap_lora
from reasoning_rl.settings.model import TINY, GGUFSourceConfig, ModelConfig, TinyModelConfig

log = logging.getLogger(__name__)

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARACTERS = string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", "")

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}
DTYPE_NAMES: tuple[str, ...] = tuple(_DTYPES)
"""The values of ``model.dtype`` and ``model.reference_dtype`` (checked with the other settings: reasoning_rl.validation)."""
TINY_ARCHS: tuple[str, ...] = ("llama", "qwen2")
"""The values of ``model.tiny.arch``."""


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str) -> torch.dtype:
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def build_char_tokenizer() -> Any:
    """A character-level tokenizer built locally (no download), with a chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *CHARACTERS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def build_tiny_model(cfg: TinyModelConfig | None = None, tokenizer: Any | None = None) -> tuple[Any, Any]:
    """Randomly initialised tiny Llama/Qwen2 decoder and its character tokenizer."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    cfg = cfg or TinyModelConfig()
    tokenizer = tokenizer or build_char_tokenizer()
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    if cfg.arch == "llama":
        config = LlamaConfig(**common)
    elif cfg.arch == "qwen2":
        config = Qwen2Config(**common)
    else:
        raise ValueError(f"unknown tiny model arch {cfg.arch!r}; expected one of {', '.join(TINY_ARCHS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.init_seed)
        model = AutoModelForCausalLM.from_config(config)
    return model, tokenizer


def pretrained_source(cfg: ModelConfig) -> str:
    """The folder or hub name a pretrained model's weights load from: a packaged GGUF model's converted
    folder (converted on first use, reasoning_rl.policy.gguf_cache), else ``cfg.name_or_path``."""
    return str(converted_folder(cfg.name_or_path, cfg.gguf)) if cfg.gguf.package else cfg.name_or_path


def load_model(cfg: ModelConfig) -> tuple[Any, Any]:
    """The policy and its tokenizer, on ``cfg.device`` in ``cfg.dtype``."""
    if cfg.name_or_path == TINY:
        model, tokenizer = build_tiny_model(cfg.tiny)
        model.to(device=resolve_device(cfg.device), dtype=resolve_dtype(cfg.dtype))
    else:
        model, tokenizer = load_pretrained(
            pretrained_source(cfg), device=cfg.device, dtype=cfg.dtype,
            trust_remote_code=cfg.trust_remote_code, attn_implementation=cfg.attn_implementation,
        )
    apply_memory_settings(model, cfg)
    if cfg.lora.r > 0:
        model = wrap_lora(model, cfg.lora, base=base_settings(cfg))
        trainable, total = trainable_parameters(model)
        log.info("model: LoRA r=%d alpha=%g on %s: %d of %d parameters trainable (%.2f%%)", cfg.lora.r,
                 cfg.lora.alpha, ",".join(cfg.lora.target_modules), trainable, total, 100 * trainable / total)
    return model, tokenizer


def base_settings(cfg: ModelConfig) -> dict[str, Any]:
    """``cfg`` as a dict without its adapter: what rebuilds the frozen base of a LoRA checkpoint."""
    from dataclasses import asdict

    out = asdict(cfg)
    out.pop("lora")
    return out


def model_config_from(settings: dict[str, Any]) -> ModelConfig:
    """A :class:`ModelConfig` from a ``base_model.json`` (unknown keys refused by the dataclass)."""
    values = dict(settings)
    tiny = TinyModelConfig(**values.pop("tiny", {}))
    gguf = GGUFSourceConfig(**values.pop("gguf", {}))
    return ModelConfig(**values, tiny=tiny, gguf=gguf)


def load_adapter_checkpoint(folder: Path, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """A LoRA checkpoint (peft adapter + ``base_model.json``): its base rebuilt from the recorded
    settings, the adapter loaded onto it (trainable, so a resumed run trains it on), and the
    checkpoint's own tokenizer."""
    from reasoning_rl.policy.lora import require_peft

    peft = require_peft(f"the LoRA checkpoint {str(folder)!r}")
    settings = read_base_settings(folder)
    cfg = model_config_from(settings)
    cfg.device, cfg.dtype = device, dtype
    base, _ = load_model(cfg)
    model = peft.PeftModel.from_pretrained(base, str(folder), is_trainable=True)
    model.reasoning_rl_base = base_settings(cfg)
    tokenizer = load_tokenizer(str(folder))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def apply_memory_settings(model: Any, cfg: ModelConfig) -> None:
    """Gradient checkpointing and the LM-head chunk of ``cfg`` on a loaded policy, said in the log."""
    if cfg.gradient_checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()  # transformers' own modules; the lean training forward checkpoints its layers itself
        model.config.use_cache = False
    vocab_size = model.config.get_text_config().vocab_size
    set_chunk(model, resolve_chunk(cfg.lm_head_chunk, vocab_size))
    log.info("model: %s; gradient checkpointing %s", describe_chunk(cfg.lm_head_chunk, vocab_size),
             "on" if cfg.gradient_checkpointing else "off")


def local_model_path(name_or_path: str) -> Path | None:
    """The local folder ``name_or_path`` names, or None for a hub name.

    Something that looks like a path (``./x``, ``/x``, ``~/x``, ``a/b/c``) but does not
    exist is an error that says what was expected, not a hub lookup.
    """
    path = Path(name_or_path).expanduser()
    if not (path.exists() or name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1):
        return None
    if not path.is_dir():
        raise FileNotFoundError(
            f"model checkpoint folder {str(path)!r} does not exist; pass a folder written by "
            "save_pretrained (e.g. <run>/checkpoint-<step>) or a Hugging Face model name"
        )
    return path


OFFLINE_MODELS = ("an offline model: model=tiny (built in) or model=smollm2-135m (a packaged GGUF file; in evaluation "
                  "its converted folder, docs/models.md)")


def model_error(name_or_path: str, exc: BaseException) -> ModelNotAvailableError:
    """One line for a model that cannot be loaded: the hub unreachable, or the library's own first line."""
    if hub_unreachable(exc):
        return ModelNotAvailableError(
            f"cannot reach the hub for {name_or_path}: pass a local folder written by save_pretrained "
            f"(model.name_or_path=<folder> in training, model=<folder> in evaluation), or use {OFFLINE_MODELS}")
    return ModelNotAvailableError(f"could not load model {name_or_path!r}: {first_line(exc)}")


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False) -> Any:
    """``AutoTokenizer`` for a hub name or a local folder; an unreachable hub is one clear line."""
    from transformers import AutoTokenizer

    path = local_model_path(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(str(path) if path is not None else name_or_path,
                                             trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise model_error(name_or_path, exc) from exc


def load_pretrained(
    name_or_path: str,
    device: str = "cpu",
    dtype: str = "float32",
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
) -> tuple[Any, Any]:
    """``AutoModelForCausalLM`` + ``AutoTokenizer`` from a hub name or a checkpoint folder.

    A local path that does not exist, or lacks a model, fails with a message saying
    what was expected instead of a long hub-lookup traceback; so does a hub name when the
    hub cannot be reached (:class:`ModelNotAvailableError`, one line).
    """
    from transformers import AutoModelForCausalLM

    path = local_model_path(name_or_path)
    if path is not None and is_adapter_folder(path):  # a LoRA checkpoint (reasoning_rl.policy.lora)
        return load_adapter_checkpoint(path, device=device, dtype=dtype)
    if path is not None and not (path / "config.json").exists():
        raise FileNotFoundError(
            f"{str(path)!r} holds no config.json, so it is not a saved model; "
            "checkpoints are the checkpoint-<step> subfolders of a run"
        )
    kwargs: dict[str, Any] = {"dtype": resolve_dtype(dtype), "trust_remote_code": trust_remote_code}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    where = str(path) if path is not None else name_or_path
    try:
        model = AutoModelForCausalLM.from_pretrained(where, **kwargs)
    except (OSError, ValueError) as exc:
        raise model_error(name_or_path, exc) from exc
    tokenizer = load_tokenizer(where, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.to(resolve_device(device))
    align_tensors(model)
    return model, tokenizer


def set_training(module: Any, mode: bool) -> None:
    """``module.train(mode)``, skipped when the module is already in that mode.

    transformers' ``train()`` / ``eval()`` walk every submodule and re-register kernel modes:
    about 0.5 ms a call on a 4-layer model, and the run loop switches modes several times a
    step (sampling, reference and old log-probs, the update)."""
    if module.training != mode:
        module.train(mode)


ALIGNMENT_BYTES = 64


def align_tensors(model: Any) -> int:
    """Copy every CPU parameter and buffer that does not start on a 64-byte boundary into a
    fresh (aligned) allocation; returns how many were copied.

    ``from_pretrained`` can hand out tensors that point into a memory-mapped safetensors file at
    an 8-byte offset, while a trained model's tensors come from PyTorch's allocator (64-byte
    aligned). Intel MKL's matrix products may round differently for data at different alignments
    (its reproducibility guide asks for 64-byte alignment), so a run resumed from a checkpoint
    would drift from the uninterrupted run at float32 rounding. Copying the few misaligned
    tensors once at load makes the two compute the same bits. Tied weights stay tied: the
    parameter object is kept and only its storage replaced."""
    copied = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.device.type == "cpu" and tensor.numel() and tensor.data_ptr() % ALIGNMENT_BYTES:
            tensor.data = tensor.data.clone()
            copied += 1
    return copied
