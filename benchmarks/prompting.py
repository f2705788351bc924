"""How ``reasoning-rl-eval`` prompts a model: explicit settings, then how the checkpoint was trained,
then the defaults; each setting's source is printed and kept in results.json."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.config import EvalConfig
from reasoning_rl.run_folder import checkpoint as ckpt
from reasoning_rl.tasks.definition import DatasetDefinition


@dataclass(frozen=True)
class Prompting:
    """How ``run_model`` prompts a model, and where each setting came from (printed and kept in results.json)."""

    chat_template: bool
    system_prompt: str | None
    prompt_template: str | None
    """The template of the run that trained the checkpoint, for its own task; None: the benchmark's own."""
    sources: dict[str, str]
    """Setting name -> where its value came from."""
    trained: dict[str, Any] | None = None
    """The checkpoint's ``prompting.json``, when it has one."""

    def generation_notes(self, max_new_tokens: int, stop: Sequence[str]) -> list[str]:
        """Where this evaluation generates differently from training's held-out evaluation (length, stop
        strings), which can change a verdict: said, not silently changed."""
        if self.trained is None:
            return []
        notes = []
        trained_tokens = self.trained.get("max_new_tokens")
        if trained_tokens is not None and trained_tokens != max_new_tokens:
            notes.append(f"max_new_tokens={max_new_tokens} here, {trained_tokens} in training's held-out evaluation "
                         f"(pass max_new_tokens={trained_tokens} to generate as it did)")
        trained_stop = self.trained.get("stop")
        if trained_stop is not None and list(trained_stop) != list(stop):
            notes.append(f"stop strings {list(stop)} here, {list(trained_stop)} in training")
        return notes

    def describe(self) -> str:
        template = "the benchmark's own" if self.prompt_template is None else repr(self.prompt_template)
        values = {"chat_template": str(self.chat_template).lower(), "system_prompt": repr(self.system_prompt),
                  "prompt_template": template}
        by_source: dict[str, list[str]] = {}  # one parenthesis per source, in order of first use
        for k, v in values.items():
            by_source.setdefault(self.sources[k], []).append(f"{k}={v}")
        return "; ".join(f"{', '.join(settings)} ({source})" for source, settings in by_source.items())


def resolve_prompting(cfg: EvalConfig, tokenizer: Any, spec: DatasetDefinition, model: str) -> Prompting:
    """Prompt settings for ``model`` on ``spec``: explicit eval settings first, then the checkpoint's
    ``prompting.json`` (how training prompted it), then today's defaults for a plain model folder or hub
    name (the chat template when the tokenizer has one, no system prompt).

    ``system_prompt=""`` on the command line means "none" over a trained system prompt. The trained
    prompt template is used only on the task it was trained on (the benchmark of the same name)."""
    folder = Path(model).expanduser()
    trained = ckpt.read_prompting(folder) if folder.is_dir() else None
    origin = f"trained with, {folder / ckpt.PROMPTING_FILE}"
    sources: dict[str, str] = {}
    if cfg.chat_template is not None:
        chat, sources["chat_template"] = bool(cfg.chat_template), "chat_template= given"
    elif trained is not None and "chat_template" in trained:
        chat, sources["chat_template"] = bool(trained["chat_template"]), origin
    else:
        has = bool(getattr(tokenizer, "chat_template", None))
        chat = has
        sources["chat_template"] = ("the tokenizer has a chat template" if has else "the tokenizer has none") + \
            (f"; no {ckpt.PROMPTING_FILE} in the model folder" if folder.is_dir() else "")
    if cfg.system_prompt is not None:
        system, sources["system_prompt"] = (cfg.system_prompt or None), "system_prompt= given"
    elif trained is not None:
        system, sources["system_prompt"] = trained.get("system_prompt"), origin
    else:
        system, sources["system_prompt"] = None, "default"
    template = None
    if trained is not None and trained.get("task") == spec.name and trained.get("prompt_template") is not None:
        template = str(trained["prompt_template"])
        sources["prompt_template"] = origin
    elif trained is not None:
        sources["prompt_template"] = f"trained on task {trained.get('task')!r}, not {spec.name!r}"
    else:
        sources["prompt_template"] = "default"
    return Prompting(chat, system, template, sources, trained)
