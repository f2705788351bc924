"""Sweeps: run folders named by their overrides, status files, relaunch skips and resumes,
the report, launchers and experiment presets."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.cli import share_the_cores, to_train_config
from reasoning_rl.config import TrainConfig
from reasoning_rl.reporting import report
from reasoning_rl.run_folder.lock import RunFolderConflict, prepare_run_folder
from reasoning_rl.validation import validate
from tests.reasoning_rl.conftest import TINY_OVERRIDES, compose_train

CONF = Path(__file__).resolve().parents[2] / "conf"
TINY = [*TINY_OVERRIDES, "trainer.steps=3", "trainer.save_every=2"]


def _sweep(sweep_dir, *overrides):
    return subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "--multirun", f"hydra.sweep.dir={sweep_dir}", *TINY, *overrides],
        capture_output=True, text=True, cwd=sweep_dir.parent, timeout=900,
    )


def _run_table_rows(report_md: str) -> list[str]:
    """The rows of the report's first table (one per run); later tables summarise settings."""
    lines = report_md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| setting | seed |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


@pytest.mark.slow
def test_sweep_layout_failures_report_and_relaunch(tmp_path):
    sweep = tmp_path / "sweep"
    out = _sweep(sweep, "algo.kl.beta=0,0.04", "algo.group_size=1,2,4")
    # group_size=1 is refused by validation: those runs fail, the sweep exits non-zero at the
    # end, and every other run still ran to the end.
    assert out.returncode != 0
    names = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert names == [f"algo.group_size={g},algo.kl.beta={b}" for g in (1, 2, 4) for b in ("0", "0.04")]
    for name in names:
        run = sweep / name / "seed=0"
        status = json.loads((run / "status.json").read_text())
        assert (run / "config.yaml").exists()
        if name.startswith("algo.group_size=1,"):
            assert status["status"] == "failed" and "algo.group_size" in status["error"]
        else:
            assert status["status"] == "finished"
            assert (run / "checkpoint-3" / "config.json").exists() and (run / "summary.json").exists()

    # Kill one run after its step-2 checkpoint, as a pre-empted job would leave it.
    killed = sweep / "algo.group_size=4,algo.kl.beta=0.04" / "seed=0"
    for name in ("summary.json", "eval_after.json"):
        (killed / name).unlink()
    subprocess.run(["rm", "-rf", str(killed / "checkpoint-3")], check=True)
    lines = (killed / "metrics.jsonl").read_text().splitlines()[:2]
    (killed / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    status = json.loads((killed / "status.json").read_text())
    (killed / "status.json").write_text(json.dumps({**status, "status": "running"}))

    assert report.main([str(sweep)]) == 0
    rows = _run_table_rows((sweep / "report" / "report.md").read_text())
    assert len(rows) == 6
    assert sum("| finished |" in r for r in rows) == 3
    assert sum("| incomplete |" in r for r in rows) == 1 and "| 2/3 |" in next(r for r in rows if "incomplete" in r)
    assert sum("failed: ConfigError: invalid configuration: algo.group_size" in r for r in rows) == 2
    records = json.loads((sweep / "report" / "runs.json").read_text())
    assert {r["status"] for r in records} == {"finished", "failed", "incomplete"}
    for png in ("reward_curves.png", "accuracy_vs_algo_kl_beta.png"):
        assert (sweep / "report" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The same sweep again, without the failing setting: finished runs are skipped, the killed
    # one resumes from its checkpoint and ends with each step logged once.
    again = _sweep(sweep, "algo.kl.beta=0,0.04", "algo.group_size=2,4")
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("already finished; skipped") == 3
    assert [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert json.loads((killed / "status.json").read_text())["status"] == "finished"
    assert report.main([str(sweep)]) == 0
    rows = _run_table_rows((sweep / "report" / "report.md").read_text())
    assert sum("| finished |" in r for r in rows) == 4


def test_a_folder_holding_another_run_is_refused(tmp_path):
    cfg = compose_train(TINY)
    from omegaconf import OmegaConf

    resolved = OmegaConf.to_container(cfg, resolve=True)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(resolved))
    (tmp_path / "status.json").write_text(json.dumps({"status": "finished"}))
    assert prepare_run_folder(tmp_path, resolved, to_train_config(cfg)) is True  # same settings: skip
    other = OmegaConf.to_container(compose_train([*TINY, "algo.kl.beta=0.5"]), resolve=True)
    with pytest.raises(RunFolderConflict, match=r"algo\.kl\.beta"):
        prepare_run_folder(tmp_path, other, to_train_config(cfg))


def test_parallel_runs_share_the_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.trainer.num_threads, cfg.rollout.reward_workers = None, None
    share_the_cores(cfg, 4)
    assert (cfg.trainer.num_threads, cfg.rollout.reward_workers) == (2, 2)
    cfg.trainer.num_threads = 1  # an explicit, smaller setting stays
    share_the_cores(cfg, 2)
    assert cfg.trainer.num_threads == 1


@pytest.mark.parametrize(("launcher", "target", "key", "value"), [
    ("local_parallel", "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "n_jobs", 2),
    ("slurm", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher", "timeout_min", 240),
])
def test_launchers_compose_without_a_cluster(launcher, target, key, value):
    cfg = compose_train([f"hydra/launcher={launcher}"], hydra=True)
    assert cfg.hydra.launcher._target_ == target and cfg.hydra.launcher[key] == value


EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes_validates_and_states_its_command(name):
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert f"reasoning-rl-train experiment={name}" in text.splitlines()[1]
    validate(to_train_config(compose_train([f"experiment={name}"])))
    hydra = compose_train([f"experiment={name}"], hydra=True).hydra
    assert str(hydra.mode) == "RunMode.MULTIRUN" and hydra.sweeper.params
    assert hydra.sweep.dir == f"sweeps/{name}"  # fixed: relaunching resumes the same sweep


def test_report_of_an_empty_folder_is_a_clear_error(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 2
    assert "no run folders" in capsys.readouterr().err


def _fake_run(run_dir, algo, seed, before, after):
    """A finished run folder as reasoning-rl-train leaves it, with Pass@K / Maj@K evaluations."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"algo": {"name": algo}, "trainer": {"seed": seed,
                                                                                          "steps": 2}}))
    (run_dir / "status.json").write_text(json.dumps({"status": "finished", "wall_s": 1.0}))
    (run_dir / "summary.json").write_text(json.dumps({"memory": {}}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward/mean": 0.5}) + "\n" for s in (1, 2)))
    for name, (p, m) in (("eval_before.json", before), ("eval_after.json", after)):
        values = {"greedy_accuracy": p[0], **{f"pass@{k}": v for k, v in zip((1, 2, 4), p)},
                  **{f"maj@{k}": v for k, v in zip((1, 2, 4), m)}}
        (run_dir / name).write_text(json.dumps(values))


def test_report_tables_and_plots_pass_and_maj_at_k_per_setting(tmp_path):
    start = ((0.2, 0.4, 0.8), (0.2, 0.25, 0.3))
    _fake_run(tmp_path / "algo=grpo" / "seed=0", "grpo", 0, start, ((0.5, 0.7, 0.8), (0.5, 0.6, 0.7)))
    _fake_run(tmp_path / "algo=grpo" / "seed=1", "grpo", 1, start, ((0.3, 0.5, 0.6), (0.3, 0.4, 0.5)))
    _fake_run(tmp_path / "algo=sft" / "seed=0", "sft", 0, start, ((0.9, 1.0, 1.0), (0.9, 0.9, 0.9)))
    assert report.main([str(tmp_path)]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| setting | runs | Pass@1 | Pass@4 | Maj@1 | Maj@4 |" in text
    assert "| algo=grpo | 2 | 40.0% | 70.0% | 40.0% | 60.0% |" in text  # means over the two seeds
    assert "| algo=sft | 1 | 90.0% | 100.0% | 90.0% | 90.0% |" in text
    assert "| before training | 3 | 20.0% | 80.0% | 20.0% | 30.0% |" in text
    assert (tmp_path / "report" / "pass_maj_at_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = json.loads((tmp_path / "report" / "runs.json").read_text())
    assert records[0]["pass_after"] == {"1": 0.5, "2": 0.7, "4": 0.8}
