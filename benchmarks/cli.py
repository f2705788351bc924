"""``reasoning-rl-eval``: benchmark accuracy of a model, a samples file, or a training run's checkpoints.

    reasoning-rl-eval benchmark=gsm8k model=<checkpoint dir> data_dir=/work/shared/data limit=20
    reasoning-rl-eval benchmark=humaneval samples=<canonical.jsonl> allow_code_execution=true
    reasoning-rl-eval benchmark=math500 run_dir=<training run> n=4 k=[1,4] temperature=0.6

The config schema, with a docstring per key, is :class:`benchmarks.config.EvalConfig`;
the defaults are in ``conf/eval.yaml``.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from benchmarks.config import EvalConfig, register_configs
from benchmarks.runner import CodeExecutionNotAllowed
from reasoning_rl.tasks.data import TaskDataError
from reasoning_rl.tasks.definition import DefinitionNotFoundError

USER_ERRORS = (TaskDataError, DefinitionNotFoundError, FileNotFoundError, CodeExecutionNotAllowed)
"""Errors of the input (unknown benchmark, missing or unreachable data or model, code execution not
allowed): one line and exit code 2, no traceback. ``FileNotFoundError`` covers
:class:`reasoning_rl.models.ModelNotAvailableError` (a hub model with no network)."""


@hydra.main(version_base="1.3", config_path="pkg://reasoning_rl.conf", config_name="eval")
def _main(cfg: DictConfig) -> None:
    from benchmarks.runner import run

    config: EvalConfig = OmegaConf.to_object(cfg)  # typed and validated against the schema
    try:
        run(config)
    except USER_ERRORS as exc:
        print(f"reasoning-rl-eval: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def model_alias(argv: list[str]) -> list[str]:
    """``model=X`` -> ``model_name_or_path=X``.

    ``conf/`` also holds the training app's ``model/`` config group, and Hydra reads
    ``model=X`` as "pick option X of that group" whenever a group of that name
    exists, so the eval key is called ``model_name_or_path`` and ``model=`` is
    accepted as its short form here.
    """
    return [f"model_name_or_path={a[len('model='):]}" if a.startswith("model=") else a for a in argv]


def eval_main() -> None:
    """Console entry point: register the schema with Hydra's ConfigStore, then run the app."""
    register_configs()
    sys.argv[1:] = model_alias(sys.argv[1:])
    _main()


if __name__ == "__main__":
    eval_main()
