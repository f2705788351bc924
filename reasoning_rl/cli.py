"""`reasoning-rl-train`: a Hydra app over the configs in ``conf/`` (installed as ``reasoning_rl.conf``).

    reasoning-rl-train                                   # the built-in default: tiny model, arithmetic
    reasoning-rl-train task=gsm8k model=qwen2.5-0.5b-instruct algo.group_size=16 algo.kl.beta=0.04
    reasoning-rl-train --multirun algo.kl.beta=0,0.04 algo.group_size=4,8
    reasoning-rl-train algo=dapo                         # an algorithm preset: conf/algo/<name>.yaml
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from reasoning_rl import distributed
from reasoning_rl.config import TrainConfig
from reasoning_rl.config_checks import ConfigError, unknown_keys_error
from reasoning_rl.config_store import register_configs
from reasoning_rl.entry_points import (
    as_user_error,
    is_multirun,
    omegaconf_message,
    run_hydra_app,
    user_errors_exit,
)
from reasoning_rl.errors import StorageError, UserError
from reasoning_rl.evaluation.retention import retention_rows
from reasoning_rl.reward_guard import describe_not_scored
from reasoning_rl.run_folder.atomic import atomic_write_text
from reasoning_rl.run_folder.lock import (  # noqa: F401 -- RunFolderConflict, prepare_run_folder: importable from here too
    RunFolderConflict,
    RunFolderLock,
    holds_a_run,
    prepare_run_folder,
    set_aside,
)
from reasoning_rl.run_folder.status import (
    read_status,
    record_failure,
    write_status,
)
from reasoning_rl.trackers import finish_trackers
from reasoning_rl.validation import key_problems, validate

log = logging.getLogger("reasoning_rl")

register_configs()
if not OmegaConf.has_resolver("run_name"):
    OmegaConf.register_new_resolver("run_name", lambda sweep_dir, overrides: run_name(sweep_dir, list(overrides)))


PROG = "reasoning-rl-train"
ELSEWHERE = "trainer.output_dir=<folder>, or hydra.sweep.dir=<folder> for a sweep"
"""How a user points a run at another folder (said when the file system refuses one)."""


def to_train_config(cfg: DictConfig) -> TrainConfig:
    """Typed config from the composed Hydra config; a :class:`ConfigError` names every key no
    schema knows and every value of the wrong type.

    Hydra refuses an unknown key written plainly (``algo.grop_size=4``), but ``+algo.grop_size=4``
    adds it, and OmegaConf would keep it as a stray attribute that nothing reads:
    :func:`~reasoning_rl.validation.key_problems` refuses it with the closest known key. ``algo``
    becomes the chosen algorithm's own dataclass (``algo.name`` through the registry): already
    so when its YAML lists ``<name>_schema``; otherwise its values are merged into that
    dataclass here."""
    from reasoning_rl.algo.registry import get_algorithm

    problems = key_problems(OmegaConf.to_container(cfg, resolve=False))  # type: ignore[arg-type]
    if problems:
        raise unknown_keys_error(problems)
    try:
        train_cfg: TrainConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
        entry = get_algorithm(train_cfg.algo.name)
        if not isinstance(train_cfg.algo, entry.config_class):
            merged = OmegaConf.merge(OmegaConf.structured(entry.config_class), OmegaConf.to_container(cfg.algo))
            train_cfg.algo = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise ConfigError(omegaconf_message(exc)) from exc
    return train_cfg


def format_eval_table(summary: dict) -> str:
    """The before/after held-out table printed at the end of a run."""
    before, after = summary.get("eval_before"), summary.get("eval_after")
    if not before or not after:
        return ""
    label = summary.get("label", "GRPO")
    lines = [
        f"| held-out accuracy | before {label} | after {label} | change |",
        "|---|---|---|---|",
    ]
    for run, key, label in (("greedy", "greedy_accuracy", "greedy"),
                            ("sampled", "sampled_accuracy", f"sampled (n={after['samples_per_problem']})")):
        lines.append(f"| {label} | {_cell(before, run, key)} | {_cell(after, run, key)} | "
                     f"{after[key] - before[key]:+.1%} |")
    lines += retention_rows(before, after)  # a second task's accuracy (evaluation.retention)
    lines.append(f"({after['num_problems']} problems never seen in training)")
    return "\n".join(lines)


def _cell(result: dict, run: str, key: str) -> str:
    """``12.5%``, or ``12.5% (not scored: error=3)`` when the verifier left samples of that run unscored."""
    prefix = f"not_scored/{run}/"
    failed = describe_not_scored({k[len(prefix):]: int(v) for k, v in result.items() if k.startswith(prefix)})
    return f"{result[key]:.1%}" + (f" (not scored: {failed})" if failed else "")


NAME_EXCLUDED = ("trainer.seed", "trainer.resume", "trainer.output_dir", "trainer.progress_bar", "experiment")
"""Overrides that never name a sweep run's folder (the seed gets its own level, seed=<N>)."""


def swept_keys(sweep_dir: str | Path) -> set[str] | None:
    """Keys the sweep varies: command-line sweep overrides (``a=1,2``, ``range(...)``) and the
    sweeper's ``params`` (experiment presets), read from the ``multirun.yaml`` Hydra writes into
    the sweep folder before launching; None when it is not there."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = Path(sweep_dir) / "multirun.yaml"
    if not path.exists():
        return None
    hydra_cfg = (yaml.safe_load(path.read_text()) or {}).get("hydra") or {}
    overrides = OverridesParser.create().parse_overrides(list((hydra_cfg.get("overrides") or {}).get("task") or []))
    keys = {o.key_or_group for o in overrides if o.is_sweep_override()}
    return keys | set((hydra_cfg.get("sweeper") or {}).get("params") or {})


def run_name(sweep_dir: str, job_overrides: list[str]) -> str:
    """Folder name of one sweep run: ``key=value`` of the settings the sweep varies, sorted and
    joined by commas (``algo.kl.beta=0.04,algo.group_size=4``); constants, the seed and the keys in
    NAME_EXCLUDED are left out; ``/`` made safe; ``default`` when nothing is left."""
    varied = swept_keys(sweep_dir)
    parts = []
    for item in job_overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        if key not in NAME_EXCLUDED and (varied is None or key in varied):
            parts.append(item.lstrip("+~"))
    return ",".join(sorted(parts)).replace("/", "_") or "default"


def parallel_jobs() -> int:
    """Runs this launcher executes at once on this machine (1 unless Hydra's joblib launcher)."""
    if not is_multirun():
        return 1
    launcher = HydraConfig.get().launcher
    if "joblib" not in str(launcher.get("_target_", "")):
        return 1
    n = int(launcher.get("n_jobs", 1) or 1)
    return (os.cpu_count() or 1) if n < 0 else n


def share_the_cores(train_cfg: TrainConfig, jobs: int) -> None:
    """With ``jobs`` runs side by side, each gets cores // jobs torch threads and reward workers
    (unless set explicitly), so parallel runs do not oversubscribe the machine."""
    if jobs <= 1:
        return
    share = max(1, (os.cpu_count() or 1) // jobs)
    if train_cfg.trainer.num_threads is None or train_cfg.trainer.num_threads > share:
        train_cfg.trainer.num_threads = share
    if train_cfg.rollout.reward_workers is None:
        train_cfg.rollout.reward_workers = share


@hydra.main(version_base="1.3", config_path="pkg://reasoning_rl.conf", config_name="train")
def _hydra_main(cfg: DictConfig) -> float:
    if is_multirun():
        # Recorded in the run's status.json; the sweep goes on, and Hydra raises the first
        # failure at its end (reported by train_main like any other).
        return run_training(cfg)
    # Caught here, not by train_main: Hydra would first print "Error executing job with overrides".
    with user_errors_exit(PROG, ELSEWHERE):
        return run_training(cfg)


def run_training(cfg: DictConfig) -> float:
    """One run: prepare its folder, train, write status and summary; the held-out greedy accuracy.

    Under torchrun the process group starts here (before any write), every rank uses rank 0's
    run folder, and rank 0 alone writes ``config.yaml``, ``status.json`` and ``eval_table.md``
    and prints the summary; a rank that fails records its error in ``status.json`` itself."""
    owns_group = distributed.init_from_env()
    try:
        result = _run_training(cfg)
    except BaseException as exc:
        if owns_group:  # after most errors the other ranks may never reach a barrier
            distributed.shutdown(barrier=isinstance(exc, UserError) and exc.raised_by_every_rank)
        raise
    if owns_group:
        distributed.shutdown()
    return result


def _run_training(cfg: DictConfig) -> float:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    resolved = OmegaConf.to_container(cfg, resolve=True)
    # Every setting is checked before anything is written: a refused command leaves no
    # config.yaml or status.json that would make its corrected version refuse the folder.
    try:
        train_cfg = to_train_config(cfg)
        validate(train_cfg)
    except UserError as exc:
        if is_multirun() and distributed.is_main():
            record_invalid_run(Path(OmegaConf.select(cfg, "trainer.output_dir", default=None)
                                    or HydraConfig.get().runtime.output_dir), cfg, exc)
        raise
    main = distributed.is_main()
    # Rank 0's folder on every rank: the default one carries a timestamp that can differ between them.
    run_dir = Path(distributed.broadcast_object(str(train_cfg.trainer.output_dir
                                                    or HydraConfig.get().runtime.output_dir)))
    lock = RunFolderLock(run_dir)  # one run per folder: held by rank 0 until the run ends (the kernel frees it on kill)
    try:
        return _run_in_folder(cfg, resolved, train_cfg, run_dir, lock if main else None)
    finally:
        lock.release()


def _run_in_folder(cfg: DictConfig, resolved: dict, train_cfg: TrainConfig, run_dir: Path,
                   lock: RunFolderLock | None) -> float:
    from reasoning_rl.trainer import Trainer

    main = distributed.is_main()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        if lock is not None:
            lock.acquire()
        finished = prepare_run_folder(run_dir, resolved, train_cfg)
        distributed.barrier()  # every rank has read the folder before rank 0 writes into it
        if main and not finished and not train_cfg.trainer.resume:
            set_aside(run_dir)  # starting over where a run was: its files are moved aside, never overwritten
        if finished:
            summary = json.loads((run_dir / "summary.json").read_text())
            if main:
                print(f"{run_dir}: already finished; skipped (delete the folder to train it again)")
            return float((summary.get("eval_after") or {}).get("greedy_accuracy", 0.0))
        share_the_cores(train_cfg, parallel_jobs())
        if main:
            atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
            log.info("run folder: %s%s", run_dir, " (resuming)" if train_cfg.trainer.resume else "")
            write_status(run_dir, "running", resumed=train_cfg.trainer.resume)
    except OSError as exc:  # a full or read-only disk: name the run folder, even when the OS error does not
        full = full_disk_error(run_dir, exc)
        if full is not None:
            raise full from exc
        raise
    t0 = time.perf_counter()
    stage = "setup"  # data, model, algorithm: nothing trained yet
    try:
        trainer = Trainer(train_cfg, run_dir)
        stage = "training"
        try:
            summary = trainer.train()
        finally:
            trainer.close()
        if main:
            stage = "finishing"
            write_status(run_dir, "finished", wall_s=time.perf_counter() - t0, steps=train_cfg.trainer.steps)
            print_summary(run_dir, summary)  # writes eval_table.md
            finish_trackers(run_dir, "finished")  # the run folder's files to wandb/mlflow, their runs ended
    except BaseException as exc:
        # Any failing rank records it (the others may be stuck in a collective, or killed by torchrun).
        # Never raises: a full disk must not hide the error that stopped the run.
        rank = {"rank": distributed.rank()} if distributed.is_distributed() else {}
        record_failure(run_dir, exc, stage=stage, wall_s=time.perf_counter() - t0, **rank)
        finish_trackers(run_dir, "failed")
        full = full_disk_error(run_dir, exc)
        if full is not None:
            raise full from exc
        raise
    after = summary.get("eval_after") or {}
    return float(after.get("greedy_accuracy", 0.0))


MIN_FREE_BYTES = 1 << 20
"""Below this much free space on the run folder's disk, a failed write is blamed on the full disk."""


def full_disk_error(run_dir: Path, exc: BaseException) -> StorageError | None:
    """A :class:`StorageError` naming the run folder when ``exc`` is a write the file system
    refused without saying where (safetensors' "No space left on device"), or when it is no user
    error of its own but the run folder's disk is full (torch's checkpoint writer reports a full
    disk only as "file write failed"); None otherwise."""
    if not isinstance(exc, Exception):
        return None
    error = as_user_error(exc, ELSEWHERE, folder=run_dir)
    if error is not None:
        return error if isinstance(error, StorageError) and not isinstance(exc, UserError) else None
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        return None
    if free >= MIN_FREE_BYTES:
        return None
    return StorageError(f"cannot write to {run_dir}: its disk is full ({free} bytes free; the write failed with "
                        f"{type(exc).__name__}: {str(exc).strip()[:160]}); free some space there or write elsewhere "
                        f"({ELSEWHERE})")


def record_invalid_run(run_dir: Path, cfg: DictConfig, exc: BaseException) -> None:
    """In a sweep, a run refused by validation is recorded in its folder (config.yaml and a
    failed status.json, ``stage: validation``) so that the report lists it; a folder that
    already holds a run is left as it is."""
    if holds_a_run(run_dir, read_status(run_dir)):
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    record_failure(run_dir, exc, stage="validation")


def print_summary(run_dir: Path, summary: dict) -> None:
    """Write ``eval_table.md`` and print the before/after table, the run folder and the warm start."""
    table = format_eval_table(summary)
    if table:
        atomic_write_text(run_dir / "eval_table.md", table + "\n")
        print("\n" + table)
    print(f"\nrun folder: {run_dir}\nfinal checkpoint: {summary['final_checkpoint']}\nreward curve: {summary['plot']}")
    if "warm_start" in summary:
        ws = summary["warm_start"]
        print(f"warm start: {ws['steps']} supervised steps, probe accuracy {ws['probe_accuracy']:.1%}")


class Terminated(BaseException):
    """SIGTERM reached the training process (``kill``, ``timeout``, a scheduler's time limit). Raised in
    the main thread so that the run's status records ``failed`` with the stage it stopped in, like any
    other error, instead of the process vanishing with ``status.json`` still saying ``running``. A
    BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}; the last checkpoint is intact: "
                         "run the same command again to resume")
        self.signum = signum


def _raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated(signum)


def train_main() -> None:
    """Console-script entry point: bad input ends in one line on stderr and exit code 2
    (``--debug`` or REASONING_RL_DEBUG=1 adds its traceback); docs/errors.md. SIGTERM ends the run
    with its status recorded (:class:`Terminated`), one line and exit code 128 + 15."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        run_hydra_app(PROG, ELSEWHERE, _hydra_main)
    except Terminated as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        raise SystemExit(128 + exc.signum) from None


if __name__ == "__main__":
    train_main()
