"""Atomic, verifiable checkpoints: Hugging Face model + tokenizer, plus everything needed to resume.

Layout of a run folder::

    <run>/checkpoint-<step>/   model (save_pretrained), tokenizer, trainer_state.pt,
                               prompting.json (how the policy was prompted), manifest.json;
                               a LoRA run (model.lora.r > 0): the adapter (adapter_model.safetensors,
                               adapter_config.json) and base_model.json instead of the model
                               (reasoning_rl.policy.lora; ``reasoning-rl-export`` merges it)
    <run>/reference/           the frozen reference policy (only when beta > 0)

``trainer_state.pt`` holds the algorithm's state (optimiser, schedule), the prompt sampler's position,
the RNG states and, when rollouts sample from older weights (``rollout.inject.stale=k`` or
``rollout.max_staleness=k``), ``weight_history``: the k versions before the checkpoint's, as
``[(version, state_dict), ...]`` oldest first (k more copies of the weights), so the k steps after a
resume sample exactly as without the break (reasoning_rl.trainer, docs/offpolicy.md).

A checkpoint is written to ``<run>/.checkpoint-<step>.tmp`` and renamed into place
only once complete, so a run killed mid-write never leaves a half checkpoint
that ``resume`` would pick up.

``manifest.json`` is written last inside that folder: the size and SHA-256 of every other
file. :func:`verify_checkpoint` re-reads the files against it, so a checkpoint damaged after
it was written (a truncated copy, a full disk, a flipped byte) is found before it is loaded:
resume skips it for the newest intact one and says so (:func:`resume_checkpoint`), and
``reasoning-rl-eval model=<folder>`` refuses it naming the file. A folder without a manifest
(a plain ``save_pretrained`` folder, or a checkpoint written before manifests existed) gets
the structural checks only: ``config.json`` parses, every ``*.safetensors`` file is as long
as its header says, ``trainer_state.pt`` is a readable zip archive (these catch truncation,
not a flipped byte).

``prompting.json`` records how the policy was prompted in training (chat template on or off,
system prompt, prompt template, task): evaluation prompts a checkpoint the same way unless told
otherwise (docs/evaluation.md).

In a data-parallel run every rank calls :func:`save_checkpoint`; rank 0 alone writes (the
ranks' models are identical: they apply the same summed gradients), the others wait at a
barrier until the checkpoint is complete. The RNG state saved is rank 0's; sampling is
reseeded every step from (seed, step, rank), so a resumed run samples as the original did.

A sharded model (``trainer.fsdp=true``) is gathered first, on every rank (collectives), into
one full state dict on rank 0, which writes the same ``save_pretrained`` folder as a single
process; so are the DTensors in the algorithm's state (AdamW's moments): a checkpoint is the
single-process one whatever the world size, and resumes sharded or not.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import random
import re
import shutil
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reasoning_rl import distributed
from reasoning_rl.errors import UserError
from reasoning_rl.policy.lora import is_lora, save_adapter
from reasoning_rl.run_folder.atomic import atomic_directory_write, recover_directory_writes

log = logging.getLogger(__name__)

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.pt"
MANIFEST_FILE = "manifest.json"
PROMPTING_FILE = "prompting.json"
MANIFEST_FORMAT = 1


class CheckpointError(UserError, ValueError):
    """A checkpoint that is incomplete or damaged; the message names the folder and the file."""


class CheckpointNotFoundError(UserError, FileNotFoundError):
    """A checkpoint folder (or a file a checkpoint needs) that is not there."""


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any],
                    keep: int | None = None, prompting: Mapping[str, Any] | None = None) -> Path:
    """Write ``checkpoint-<step>`` atomically (``prompting`` -> ``prompting.json``, the manifest last);
    keep only the ``keep`` newest. With several ranks: rank 0 writes, every rank returns only once
    the checkpoint is complete (barriers)."""

    full_model = distributed.full_model_state(model)  # sharded: rank 0's full copy; else None
    if distributed.is_sharded(model):
        state = distributed.full_tensors(state)

    def write(tmp: Path) -> None:
        if full_model is not None:
            model.save_pretrained(tmp, state_dict=full_model)
        elif is_lora(model):  # the adapter and the settings of its frozen base, not the whole model
            save_adapter(model, tmp)
        else:
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        torch.save({**state, "step": step, "rng": rng_state()}, tmp / STATE_FILE)
        if prompting is not None:
            (tmp / PROMPTING_FILE).write_text(json.dumps(dict(prompting), indent=2) + "\n", encoding="utf-8")
        write_manifest(tmp, step)  # last: it covers every file above

    path = Path(run_dir) / f"checkpoint-{step}"
    distributed.barrier()  # every rank has finished the step (and no rank still reads an old checkpoint)
    if distributed.is_main():
        atomic_directory_write(path, write)
        if keep is not None and keep > 0:
            for old in list_checkpoints(run_dir)[:-keep]:
                shutil.rmtree(old)
    distributed.barrier()  # no rank goes on before the checkpoint is complete
    return path


# -- integrity ------------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)


def write_manifest(folder: str | Path, step: int | None = None) -> Path:
    """``manifest.json`` in ``folder``: ``{"format", "step", "files": {relative path: {"bytes", "sha256"}}}``
    of every other file in it."""
    folder = Path(folder)
    files = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
             for p in _files(folder)}
    path = folder / MANIFEST_FILE
    path.write_text(json.dumps({"format": MANIFEST_FORMAT, "step": step, "files": files}, indent=2) + "\n",
                    encoding="utf-8")
    return path


def has_manifest(folder: str | Path) -> bool:
    return (Path(folder) / MANIFEST_FILE).is_file()


def checkpoint_problem(folder: str | Path, hashes: bool = True) -> str | None:
    """What is wrong with the checkpoint (or model) folder, in a few words, or None when it is intact.

    With a manifest: every listed file is there with its size and (``hashes``) its SHA-256. Without
    one: the structural checks of the module docstring."""
    folder = Path(folder)
    if not folder.is_dir():
        return "the folder does not exist"
    if not has_manifest(folder):
        return _structural_problem(folder)
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text(encoding="utf-8"))
        files = manifest["files"]
        listed = {str(name): (int(entry["bytes"]), str(entry["sha256"])) for name, entry in files.items()}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"{MANIFEST_FILE} is unreadable ({type(exc).__name__}: {exc})"
    for name, (size, digest) in listed.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        actual = path.stat().st_size
        if actual != size:
            return f"{name} has {actual} bytes, the manifest says {size}"
        if hashes and _sha256(path) != digest:
            return f"{name} does not match its SHA-256 in the manifest (its bytes changed after it was written)"
    return None


def _structural_problem(folder: Path) -> str | None:
    """Checks that need no manifest: config.json parses, safetensors files are whole, trainer_state.pt is a zip."""
    config = folder / "config.json"
    if config.is_file():
        try:
            json.loads(config.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"config.json is not valid JSON ({exc})"
    for path in sorted(folder.glob("*.safetensors")):
        problem = _safetensors_problem(path)
        if problem:
            return f"{path.name} {problem}"
    state = folder / STATE_FILE
    if state.is_file() and not zipfile.is_zipfile(state):
        return f"{STATE_FILE} is not a readable archive (truncated or overwritten)"
    return None


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file is ``u64 header length, JSON header, data``; the header gives the data's length."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"is {size} bytes, too short for a safetensors file"
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            return f"is truncated: its header alone should be {n} bytes, the file has {size}"
        try:
            header = json.loads(f.read(n))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
            return f"has an unreadable header ({type(exc).__name__})"
    if 8 + n + end != size:
        return f"is {size} bytes but its header describes {8 + n + end} (truncated or overwritten)"
    return None


def check_checkpoint(folder: str | Path, what: str = "checkpoint") -> None:
    """Raise :class:`CheckpointError` (:class:`CheckpointNotFoundError`) naming ``folder`` unless it is intact."""
    folder = Path(folder)
    problem = checkpoint_problem(folder)
    if problem is None:
        return
    if not folder.is_dir():
        raise CheckpointNotFoundError(f"{what} {str(folder)!r} does not exist")
    raise CheckpointError(f"{what} {str(folder)!r} is corrupt: {problem}; use another checkpoint "
                          "(or re-copy this one)")


# -- finding checkpoints ----------------------------------------------------------------------------------
def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run (their ``trainer_state.pt`` is there), oldest first. Not verified:
    :func:`resume_checkpoint` verifies."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if p.is_dir() and (m := CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found) if (p / STATE_FILE).exists()]


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def resume_checkpoint(run_dir: Path) -> Path | None:
    """The newest intact checkpoint of ``run_dir``, or None when it holds none.

    Each newer one that fails :func:`checkpoint_problem` is logged as a warning naming it and
    what is wrong, and so is the one used instead; one without a manifest (written before
    manifests existed) is used after its structural checks, with a warning that its contents
    cannot be verified. Checkpoints exist but none is intact: :class:`CheckpointError`."""
    for line in recover_directory_writes(run_dir, prefix="checkpoint-"):  # what a killed run left
        log.warning("resume: %s", line)
    candidates = list_checkpoints(run_dir)
    skipped: dict[str, str] = {}  # name -> what is wrong
    for folder in reversed(candidates):
        problem = checkpoint_problem(folder)
        if problem is not None:
            log.warning("checkpoint %s is corrupt (%s); skipping it", folder, problem)
            skipped[folder.name] = problem
            continue
        if not has_manifest(folder):
            log.warning("checkpoint %s has no %s (written by an older version): its files cannot be verified, "
                        "only its structure", folder, MANIFEST_FILE)
        if skipped:
            log.warning("resuming from %s, the newest intact checkpoint, instead of the corrupt %s",
                        folder, ", ".join(skipped))
        return folder
    if skipped:
        raise CheckpointError(f"no intact checkpoint to resume from in {str(run_dir)!r}: {'; '.join(f'{n} ({p})' for n, p in skipped.items())}. "
                              "Restore one, or start afresh in a new run folder")
    return None


# -- reading ----------------------------------------------------------------------------------------------
def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    path = Path(checkpoint) / STATE_FILE
    if not path.exists():
        raise CheckpointNotFoundError(f"{str(path)!r} is missing: {str(checkpoint)!r} is not a complete "
                                      "training checkpoint")
    try:
        return torch.load(path, weights_only=False)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"checkpoint {str(checkpoint)!r} is corrupt: {STATE_FILE} cannot be read "
                              f"({first})") from exc


def read_prompting(folder: str | Path) -> dict[str, Any] | None:
    """The ``prompting.json`` of a checkpoint, or None when the folder has none (a plain model folder)."""
    path = Path(folder) / PROMPTING_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{str(path)!r} is not valid JSON ({exc}); the checkpoint is corrupt") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{str(path)!r} holds a {type(data).__name__}, not an object; the checkpoint is corrupt")
    return data
