"""``reasoning-rl-eval``: benchmark accuracy of a model, a samples file, or a training run's checkpoints.

    reasoning-rl-eval benchmark=gsm8k model=<checkpoint dir> data_dir=../shared/data limit=20
    reasoning-rl-eval benchmark=humaneval samples=<canonical.jsonl> allow_code_execution=true
    reasoning-rl-eval benchmark=math500 run_dir=<training run> n=4 k=[1,4] temperature=0.6
    reasoning-rl-eval benchmark=math500 samples=<file.jsonl> graders=[ours,strict]   # grader sensitivity

The config schema, with a docstring per key, is :class:`benchmarks.config.EvalConfig`;
the defaults are in ``conf/eval.yaml``.
"""

from __future__ import annotations

import dataclasses
import sys

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from benchmarks.config import EvalConfig, register_configs, validate
from reasoning_rl.config_checks import ConfigError, unknown_keys, unknown_keys_error
from reasoning_rl.entry_points import is_multirun, omegaconf_message, run_hydra_app, user_errors_exit

PROG = "reasoning-rl-eval"
ELSEWHERE = "output_dir=<folder>"
"""How a user points the results at another folder (said when the file system refuses one)."""


def to_eval_config(cfg: DictConfig) -> EvalConfig:
    """Typed, checked config: a missing ``benchmark=``, a key no schema knows or a bad value is a
    :class:`ConfigError` naming the key."""
    problems = unknown_keys(OmegaConf.to_container(cfg, resolve=False), EvalConfig)  # type: ignore[arg-type]
    if problems:
        raise unknown_keys_error(problems)
    try:
        config: EvalConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise ConfigError(omegaconf_message(exc)) from exc
    validate(config)
    return config


@hydra.main(version_base="1.3", config_path="pkg://reasoning_rl.conf", config_name="eval")
def _main(cfg: DictConfig) -> None:
    if is_multirun():  # a failing job is collected by Hydra; the sweep goes on and ends with its error
        dispatch(to_eval_config(cfg))
        return
    # Bad input ends here in one line and exit code 2 (docs/errors.md); Hydra would first print
    # "Error executing job with overrides".
    with user_errors_exit(PROG, ELSEWHERE, folder=cfg.get("output_dir")):
        dispatch(to_eval_config(cfg))


def dispatch(config: EvalConfig) -> list[dict]:
    """``suite=`` runs a suite (:mod:`benchmarks.suite_run`), anything else :func:`benchmarks.runner.run`."""
    from benchmarks.generation import resolve_model
    from benchmarks.runner import run  # loaded with the app, after Hydra has parsed the command line
    from benchmarks.suite_run import run_suite

    # model=smollm2-135m (a conf/model/ preset) means its model, as in training.
    model = config.model_name_or_path
    config = dataclasses.replace(config, model_name_or_path=resolve_model(model) if model else model,
                                 compare=[resolve_model(m) for m in config.compare])
    return run_suite(config) if config.suite else run(config)


def model_alias(argv: list[str]) -> list[str]:
    """``model=X`` -> ``model_name_or_path=X``.

    ``conf/`` also holds the training app's ``model/`` config group, and Hydra reads
    ``model=X`` as "pick option X of that group" whenever a group of that name
    exists, so the eval key is called ``model_name_or_path`` and ``model=`` is
    accepted as its short form here.
    """
    return [f"model_name_or_path={a[len('model='):]}" if a.startswith("model=") else a for a in argv]


def eval_main() -> None:
    """Console entry point: register the schema with Hydra's ConfigStore, then run the app; bad
    input ends in ``reasoning-rl-eval: <message>`` and exit code 2 (``--debug`` adds the traceback)."""
    register_configs()
    sys.argv[1:] = model_alias(sys.argv[1:])
    run_hydra_app(PROG, ELSEWHERE, _main)


if __name__ == "__main__":
    eval_main()
