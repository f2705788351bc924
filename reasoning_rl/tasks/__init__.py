"""Tasks: dataset + prompt template + reference field + reward."""

from reasoning_rl.tasks.arithmetic import make_arithmetic_dataset
from reasoning_rl.tasks.base import (
    ArithmeticConfig,
    Example,
    Task,
    TaskConfig,
    TaskDataError,
    load_local_rows,
    reward_specs,
)

__all__ = [
    "ArithmeticConfig",
    "Example",
    "Task",
    "TaskConfig",
    "TaskDataError",
    "load_local_rows",
    "make_arithmetic_dataset",
    "reward_specs",
]
