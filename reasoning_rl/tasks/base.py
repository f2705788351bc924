"""A task binds a dataset, a prompt template, the reference field and the reward.

Data comes from one of three sources, chosen by ``TaskConfig.source``:

* ``hub``: ``datasets.load_dataset(hub_name, hub_config, split=...)`` (the default
  for real benchmarks; needs network or a populated HF cache);
* ``files``: local JSON/JSONL/Parquet files, given per split in ``data_files`` or
  found as ``data_dir / local_files[split]`` (setting ``data_dir`` switches a hub
  task to its local copy, e.g. ``task.data_dir=../shared/data``);
* ``arithmetic``: generated problems (no download).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reasoning_rl.tasks.arithmetic import make_arithmetic_dataset
from rewards.compose import RewardSpec


@dataclass
class ArithmeticConfig:
    """Shape of the synthetic arithmetic problems (``source: arithmetic``)."""

    max_operand: int = 20
    """Operands are drawn from 0..max_operand."""
    operations: str = "+-*"
    """Operators to use, a subset of ``+-*``."""
    test_fraction: float = 0.2
    """Share of all problems held out for evaluation (fixed by a hash of the text)."""
    num_train: int = 4000
    """Training rows generated (the train split is cycled if it is smaller)."""
    num_eval: int = 200
    """Held-out problems (at most the size of the test split; never repeated)."""


@dataclass
class TaskConfig:
    """What to train on and how to score it."""

    name: str = "arithmetic"
    """Task name, used in logs and run folders."""
    source: str = "arithmetic"
    """``hub``, ``files`` or ``arithmetic`` (see module docstring)."""
    hub_name: str | None = None
    """Hugging Face dataset name for ``source: hub`` (e.g. ``openai/gsm8k``)."""
    hub_config: str | None = None
    """Dataset configuration name (e.g. ``main`` for GSM8K)."""
    train_split: str = "train"
    """Split used for training."""
    eval_split: str | None = "test"
    """Split used for held-out evaluation (null: none)."""
    data_dir: str | None = None
    """Folder with local copies; when set, files ``local_files[split]`` in it are used instead of the hub."""
    local_files: dict[str, str] = field(default_factory=dict)
    """File name per split inside ``data_dir`` (e.g. ``{train: gsm8k_train.jsonl, test: gsm8k_test.jsonl}``)."""
    data_files: dict[str, str] = field(default_factory=dict)
    """Explicit local file path per split (JSON, JSONL or Parquet); used when ``source: files``."""
    prompt_template: str = "{question}"
    """Python format string over the row's fields, e.g. ``"{question} Answer: "``."""
    use_chat_template: bool = False
    """Wrap the rendered prompt as a user message with the tokenizer's chat template."""
    system_prompt: str | None = None
    """System message when ``use_chat_template`` is on."""
    answer_field: str = "answer"
    """Row field holding the reference passed to the verifiers."""
    id_field: str | None = None
    """Row field with a stable id (default: the row index)."""
    fields: list[str] = field(default_factory=list)
    """Extra row fields passed to the verifiers as keyword arguments (e.g. ``test``, ``entry_point``)."""
    rewards: list[RewardSpec] = field(default_factory=lambda: [RewardSpec(name="math")])
    """Reward components (verifier name, weight, options); the first one defines accuracy."""
    none_policy: str = "propagate"
    """How an unscorable component combines: ``propagate``, ``skip`` or ``zero`` (see rewards.compose)."""
    max_train_examples: int | None = None
    """Keep only the first N training rows (null: all)."""
    max_eval_examples: int | None = 200
    """Keep only the first N held-out rows (null: all)."""
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    """Generator settings for ``source: arithmetic``."""


@dataclass
class Example:
    """One problem, ready for the policy and the verifiers."""

    id: str
    prompt: str
    reference: Any
    fields: dict[str, Any]


class TaskDataError(ValueError):
    """A dataset row or source does not fit the task's configuration."""


class Task:
    """Loads a task's rows and renders them as :class:`Example` objects."""

    def __init__(self, cfg: TaskConfig) -> None:
        if cfg.source not in ("hub", "files", "arithmetic"):
            raise ValueError(f"task {cfg.name!r}: unknown source {cfg.source!r}; expected hub, files or arithmetic")
        if not cfg.rewards:
            raise ValueError(f"task {cfg.name!r} has no reward components; set task.rewards")
        self.cfg = cfg
        self._template_fields = [f for _, f, _, _ in string.Formatter().parse(cfg.prompt_template) if f]

    # -- data -------------------------------------------------------------------------------------
    def load_rows(self, split: str) -> list[dict[str, Any]]:
        cfg = self.cfg
        limit = cfg.max_train_examples if split == cfg.train_split else cfg.max_eval_examples
        if cfg.source == "arithmetic":
            a = cfg.arithmetic
            is_train = split == cfg.train_split
            rows = make_arithmetic_dataset(
                a.num_train if is_train else a.num_eval, seed=0 if is_train else 1,
                split="train" if is_train else "test", max_operand=a.max_operand,
                operations=a.operations, test_fraction=a.test_fraction,
                cycle=is_train,  # held-out problems are each evaluated once
            )
        else:
            rows = _load_dataset_rows(cfg, split)
        return rows[:limit] if limit is not None else rows

    def examples(self, split: str, tokenizer: Any | None = None) -> list[Example]:
        """Rendered examples of ``split``; a row lacking a needed field is a clear error."""
        return [self.to_example(row, i, tokenizer) for i, row in enumerate(self.load_rows(split))]

    def to_example(self, row: dict[str, Any], index: int, tokenizer: Any | None = None) -> Example:
        cfg = self.cfg
        needed = [*self._template_fields, cfg.answer_field, *cfg.fields, *([cfg.id_field] if cfg.id_field else [])]
        missing = [f for f in needed if f not in row]
        if missing:
            raise TaskDataError(
                f"task {cfg.name!r}: row {index} has no field(s) {missing}; it has {sorted(row)}. "
                "Fix task.prompt_template / task.answer_field / task.fields, or the data."
            )
        return Example(
            id=str(row[cfg.id_field]) if cfg.id_field else f"{cfg.name}-{index}",
            prompt=self.render_prompt(row, tokenizer),
            reference=row[cfg.answer_field],
            fields={f: row[f] for f in cfg.fields},
        )

    def render_prompt(self, row: dict[str, Any], tokenizer: Any | None = None) -> str:
        text = self.cfg.prompt_template.format(**row)
        if not self.cfg.use_chat_template:
            return text
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"task {self.cfg.name!r} sets use_chat_template=true but the tokenizer has no chat template; "
                "set task.use_chat_template=false or use an instruct model"
            )
        messages = ([{"role": "system", "content": self.cfg.system_prompt}] if self.cfg.system_prompt else [])
        messages.append({"role": "user", "content": text})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _load_dataset_rows(cfg: TaskConfig, split: str) -> list[dict[str, Any]]:
    import datasets

    path: str | None = None
    if cfg.data_dir is not None:
        if split not in cfg.local_files:
            raise TaskDataError(
                f"task {cfg.name!r}: data_dir is set but local_files has no file for split {split!r} "
                f"(it has {sorted(cfg.local_files)})"
            )
        path = str(Path(cfg.data_dir).expanduser() / cfg.local_files[split])
    elif cfg.source == "files":
        if split not in cfg.data_files:
            raise TaskDataError(f"task {cfg.name!r}: data_files has no file for split {split!r} (it has {sorted(cfg.data_files)})")
        path = cfg.data_files[split]
    if path is not None:
        return load_local_rows(path)
    if not cfg.hub_name:
        raise TaskDataError(f"task {cfg.name!r}: source is 'hub' but hub_name is not set")
    try:
        ds = datasets.load_dataset(cfg.hub_name, cfg.hub_config, split=split)
    except Exception as exc:
        raise TaskDataError(
            f"task {cfg.name!r}: could not load {cfg.hub_name!r} ({cfg.hub_config}) split {split!r} from the hub: {exc}. "
            "Offline? Point task.data_dir at local copies."
        ) from exc
    return [dict(r) for r in ds]


def load_local_rows(path: str) -> list[dict[str, Any]]:
    """Rows of a local JSON, JSONL or Parquet file (through ``datasets`` so types match the hub)."""
    import datasets

    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"dataset file {str(p)!r} does not exist")
    kind = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}.get(p.suffix)
    if kind is None:
        raise TaskDataError(f"unsupported dataset file {str(p)!r}: use .json, .jsonl or .parquet")
    ds = datasets.load_dataset(kind, data_files=str(p), split="train")
    return [dict(r) for r in ds]


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
