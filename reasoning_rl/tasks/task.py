"""A training task: a dataset definition plus the settings only training has.

``task.name`` names a definition of ``reasoning_rl/tasks/definitions/`` (the same file
``reasoning-rl-eval benchmark=<name>`` reads) or the path of a definition YAML of your
own. The definition gives the data of each split, the prompt template, the reference
and the verifier; :class:`TaskConfig` adds what only training decides (split
overrides, local copies, generator settings, chat template, extra reward components,
how many rows). Problems are built by :func:`reasoning_rl.tasks.data.load_problems`,
the function evaluation uses too, so a training example and a benchmark problem of the
same row have the same prompt, reference and verifier fields.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks.data import (
    DatasetFieldError,
    Problem,
    TaskDataError,
    load_problems,
    local_path,
    render,
)
from reasoning_rl.tasks.definition import DatasetDefinition, get_definition
from reasoning_rl.tasks.prompts import build_prompt
from rewards.compose import CompositeReward
from rewards.specs import RewardSpec

log = logging.getLogger(__name__)


@dataclass
class Example:
    """One problem, ready for the policy and the verifiers."""

    id: str
    prompt: str
    reference: Any
    fields: dict[str, Any]
    solution: str | None = None
    """The dataset's own solution rendered as a completion (the definition's ``reference_completion``
    template), the target of SFT; None when the row lacks a field the template needs."""


class Task:
    """A dataset definition resolved for training: its splits, examples and reward."""

    def __init__(self, cfg: TaskConfig) -> None:
        self.cfg = cfg
        self.definition = self._with_template(get_definition(cfg.name, kind="task"))
        d = self.definition
        train_split = cfg.train_split or d.train_split
        if train_split is None:
            raise TaskDataError(
                f"task {d.name!r} has no training split: its splits ({', '.join(d.splits)}) are for evaluation. "
                "Train on another task, or set task.train_split=<split> with task.allow_train_on_eval=true "
                "to train on evaluation problems knowingly."
            )
        self.train_split: str = train_split
        self.eval_split: str | None = cfg.eval_split or d.eval_split
        for split in (self.train_split, self.eval_split):
            if split is not None:  # a split without a usable local copy fails here, before any model loads
                local_path(*self._resolve(split), cfg.data_dir, cfg.data_files.get(split))
        self._check_not_training_on_eval()
        self.reward_specs = self._reward_specs()

    def _with_template(self, definition: DatasetDefinition) -> DatasetDefinition:
        if self.cfg.prompt_template is None:
            return definition
        return dataclasses.replace(definition, prompt_template=self.cfg.prompt_template)

    def _resolve(self, split: str) -> tuple[DatasetDefinition, str]:
        """The definition and split name behind ``split`` (``<definition>:<split>`` names another definition)."""
        if ":" not in split:
            self.definition.source(split)
            return self.definition, split
        name, _, own = split.partition(":")
        other = self._with_template(get_definition(name, kind="task"))
        other.source(own)
        if other.verifier != self.definition.verifier:
            raise TaskDataError(
                f"task {self.definition.name!r}: eval split {split!r} is scored by {other.verifier}, but the task by "
                f"{self.definition.verifier}; held-out accuracy needs the same verifier"
            )
        return other, own

    def _check_not_training_on_eval(self) -> None:
        measured = {(self.definition.name, self.definition.eval_split)}
        if self.eval_split is not None:
            other, split = self._resolve(self.eval_split)
            measured.add((other.name, split))
        if (self.definition.name, self.train_split) not in measured:
            return
        message = (f"task {self.definition.name!r}: train split {self.train_split!r} is a split evaluation measures "
                   f"(held-out: {self.eval_split!r}; reasoning-rl-eval benchmark={self.definition.name}: "
                   f"{self.definition.eval_split!r}), so its accuracy would not be held out")
        if not self.cfg.allow_train_on_eval:
            raise TaskDataError(message + ". Pick another task.train_split, or set task.allow_train_on_eval=true "
                                "to do it knowingly.")
        log.warning("%s (task.allow_train_on_eval=true)", message)

    def _reward_specs(self) -> list[RewardSpec]:
        """The reward's components; the first is always the definition's verifier, which measures accuracy.

        ``task.rewards`` empty: that verifier alone. Listed first: it is that component (its options on
        top of the definition's). Not listed: it is put first with weight 0, measured but not rewarded.
        """
        verifier = self.definition.verifier
        accuracy = RewardSpec(name=verifier.name, options=dict(verifier.options))
        specs = reward_specs(self.cfg.rewards)
        if not specs:
            return [accuracy]
        if specs[0].name == verifier.name:
            return [dataclasses.replace(specs[0], options={**verifier.options, **specs[0].options}), *specs[1:]]
        if any(s.name == verifier.name for s in specs):
            raise TaskDataError(
                f"task {self.definition.name!r}: task.rewards lists the definition's verifier {verifier.name!r} "
                f"after {specs[0].name!r}; it measures accuracy, so it must be the first component: list it first"
            )
        return [dataclasses.replace(accuracy, weight=0.0), *specs]

    def reward(self) -> CompositeReward:
        """The training reward; its first component is the definition's verifier (accuracy)."""
        return CompositeReward(self.reward_specs, none_policy=self.cfg.none_policy)

    def examples(self, split: str, tokenizer: Any | None = None) -> list[Example]:
        """Rendered examples of ``split``; a row lacking a needed field is a clear error.

        Training rows may repeat a problem (a cycled generator); held-out ids must be unique.
        """
        definition, own = self._resolve(split)
        is_train = split == self.train_split
        problems, _ = load_problems(
            definition, own, data_dir=self.cfg.data_dir, data_file=self.cfg.data_files.get(split),
            source_kwargs=self.cfg.source_kwargs if definition.name == self.definition.name else None,
            limit=self.cfg.max_train_examples if is_train else self.cfg.max_eval_examples, unique_ids=not is_train,
        )
        return [Example(p.task_id, self.render_prompt(p.prompt, tokenizer), p.reference, p.fields,
                        self._solution(definition, p)) for p in problems]

    @staticmethod
    def _solution(definition: DatasetDefinition, problem: Problem) -> str | None:
        """The row's reference solution as a completion, or None when the row cannot fill the template."""
        try:
            return render(definition.reference_completion, {**problem.row, "reference": problem.reference},
                          f"{definition.name} problem {problem.task_id!r}")
        except DatasetFieldError:
            return None

    def prompting(self) -> dict[str, Any]:
        """How the policy is prompted, as a checkpoint records it (``prompting.json``): evaluation
        prompts the checkpoint the same way by default (docs/evaluation.md)."""
        return {
            "task": self.definition.name,
            "task_config_name": self.cfg.name,
            "chat_template": self.cfg.use_chat_template,
            "system_prompt": self.cfg.system_prompt,
            "prompt_template": self.definition.prompt_template,
            "prompt_template_overridden": self.cfg.prompt_template is not None,
            "num_fewshot": 0,
        }

    def render_prompt(self, text: str, tokenizer: Any | None = None) -> str:
        """``text`` as the policy sees it: as a chat user turn when ``use_chat_template`` is on (the same
        :func:`~reasoning_rl.tasks.prompts.build_prompt` evaluation uses, without few-shot examples)."""
        return build_prompt(text, [], tokenizer, self.cfg.use_chat_template, self.cfg.system_prompt)


def reward_specs(specs: Sequence[Any]) -> list[RewardSpec]:
    """Accept RewardSpec objects or plain mappings (from YAML)."""
    out = []
    for s in specs:
        if isinstance(s, RewardSpec):
            out.append(s)
        else:
            d = dict(s)
            out.append(RewardSpec(name=d["name"], weight=float(d.get("weight", 1.0)),
                                  options=dict(d.get("options") or {}), label=d.get("label")))
    return out
