"""Datasets for training and evaluation: one definition per dataset (``definitions/*.yaml``).

:mod:`~reasoning_rl.tasks.definition` reads the definitions, :mod:`~reasoning_rl.tasks.data`
turns a split's rows into problems, :mod:`~reasoning_rl.tasks.scoring` decides correctness,
:class:`Task` is a definition resolved for training (``reasoning-rl-train task=<name>``);
the benchmark harness (``reasoning-rl-eval benchmark=<name>``) reads the same definitions.
"""

from reasoning_rl.tasks.arithmetic import make_arithmetic_dataset
from reasoning_rl.tasks.data import DatasetFieldError, Problem, TaskDataError, load_local_rows, load_problems
from reasoning_rl.tasks.definition import (
    DatasetDefinition,
    DefinitionNotFoundError,
    get_definition,
    list_definitions,
)
from reasoning_rl.tasks.task import Example, Task, reward_specs

__all__ = [
    "DatasetDefinition",
    "DatasetFieldError",
    "DefinitionNotFoundError",
    "Example",
    "Problem",
    "Task",
    "TaskDataError",
    "get_definition",
    "list_definitions",
    "load_local_rows",
    "load_problems",
    "make_arithmetic_dataset",
    "reward_specs",
]
