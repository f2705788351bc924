"""Atomic checkpoints: Hugging Face model + tokenizer, plus everything needed to resume.

Layout of a run folder::

    <run>/checkpoint-<step>/   model (save_pretrained), tokenizer, trainer_state.pt
    <run>/reference/           the frozen reference policy (only when beta > 0)

A checkpoint is written to ``<run>/.checkpoint-<step>.tmp`` and renamed into place
only once complete, so a run killed mid-write never leaves a half checkpoint
that ``resume`` would pick up.

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

import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reasoning_rl import distributed
from reasoning_rl.atomic import atomic_directory_write

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.pt"


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
                    keep: int | None = None) -> Path:
    """Write ``checkpoint-<step>`` atomically; keep only the ``keep`` newest. With several ranks:
    rank 0 writes, every rank returns only once the checkpoint is complete (barriers)."""

    full_model = distributed.full_model_state(model)  # sharded: rank 0's full copy; else None
    if distributed.is_sharded(model):
        state = distributed.full_tensors(state)

    def write(tmp: Path) -> None:
        if full_model is not None:
            model.save_pretrained(tmp, state_dict=full_model)
        else:
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        torch.save({**state, "step": step, "rng": rng_state()}, tmp / STATE_FILE)

    path = Path(run_dir) / f"checkpoint-{step}"
    distributed.barrier()  # every rank has finished the step (and no rank still reads an old checkpoint)
    if distributed.is_main():
        atomic_directory_write(path, write)
        if keep is not None and keep > 0:
            for old in list_checkpoints(run_dir)[:-keep]:
                shutil.rmtree(old)
    distributed.barrier()  # no rank goes on before the checkpoint is complete
    return path


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if p.is_dir() and (m := CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found) if (p / STATE_FILE).exists()]


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    path = Path(checkpoint) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{str(path)!r} is missing: {str(checkpoint)!r} is not a complete training checkpoint")
    return torch.load(path, weights_only=False)
