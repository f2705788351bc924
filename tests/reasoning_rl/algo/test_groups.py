"""Step metrics and completion rows built from scored groups: the tamper counts of the code sandbox."""

from __future__ import annotations

import json

import torch

from reasoning_rl.algo.groups import (
    ScoredGroups,
    completion_rows,
    rollout_metrics,
    select_groups,
    tamper_kinds,
)
from reasoning_rl.rollouts.sampling import Completion
from reasoning_rl.tasks import Example
from rewards.batch import BatchScores
from rewards.code import CodeVerifier
from rewards.code.sandbox.inside.tamper import KINDS
from rewards.types import VerifierResult
from tests.reasoning_rl.documented_metrics import undocumented


def _groups() -> ScoredGroups:
    # 2 prompts x 2 completions; completion 1 exited early, completion 3 patched builtins AND exited.
    infos = [{}, {"tamper": ["early_exit"]}, {}, {"tamper": ["early_exit", "patch_builtins"]}]
    results = [VerifierResult.ok(s, **info) for s, info in zip([1.0, 0.0, 1.0, 0.0], infos)]
    batch = BatchScores(results=results, num_timeouts=0, num_errors=0, num_unscorable=0, seconds=0.1)
    examples = [Example(id=f"e{i}", prompt="p", reference=None, fields={}) for i in range(2)]
    completions = [Completion(text=f"c{i}", token_ids=[1, 2], finish_reason="stop") for i in range(4)]
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    return ScoredGroups(examples, completions, rewards, {"code": batch}, {"timeouts": 0, "errors": 0, "unscorable": 0},
                        {}, tamper_kinds([CodeVerifier()]))


def test_tamper_counts_per_kind_zero_included_and_documented() -> None:
    metrics = rollout_metrics(_groups(), "code")
    counts = {k: v for k, v in metrics.items() if k.startswith("reward/tamper/")}
    # early_exit: completions 1 and 3; patch_builtins: completion 3; every other kind 0.
    assert counts == {f"reward/tamper/{k}": {"early_exit": 2, "patch_builtins": 1}.get(k, 0) for k in KINDS}
    assert undocumented(metrics) == []


def test_completion_rows_flag_tampering() -> None:
    rows = completion_rows(_groups())
    assert [r["tamper"] for r in rows] == [[], ["early_exit"], [], ["early_exit", "patch_builtins"]]


def test_no_tamper_metrics_without_a_verifier_that_reports_them() -> None:
    groups = _groups()
    groups.tamper_kinds = tamper_kinds([lambda completion, reference: 1.0])
    assert not any(k.startswith("reward/tamper/") for k in rollout_metrics(groups, "code"))
    assert "tamper" not in completion_rows(groups)[0]


def test_selected_groups_keep_the_kinds() -> None:
    kept = select_groups([_groups()], [(0, 1)])
    assert rollout_metrics(kept, "code")["reward/tamper/early_exit"] == 1


def test_a_grpo_run_with_the_audit_logs_its_metrics_and_disagreements(small_cfg, tmp_path) -> None:
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer
    from rewards.specs import AuditConfig

    cfg = small_cfg
    cfg.trainer.steps = 2
    # The second verifier: our math checker with the strict extraction (explicit answer markers only).
    cfg.task.audit = AuditConfig(verifier="math", fraction=0.5, options={"strict": True})
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer.train()
    finally:
        trainer.close()
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    for m in metrics:
        assert {"audit/disagree_rate", "audit/ours_pass_theirs_fail", "audit/ours_fail_theirs_pass"} <= set(m)
        assert m["audit/samples"] >= 1
        assert undocumented(m) == []
    disagreements = sum(m["audit/ours_pass_theirs_fail"] + m["audit/ours_fail_theirs_pass"] for m in metrics)
    audit_file = tmp_path / "run" / "audit.jsonl"
    rows = [json.loads(line) for line in audit_file.read_text().splitlines()] if audit_file.exists() else []
    assert len(rows) == disagreements  # one row per disagreement, nothing else
    for row in rows:
        assert {"completion", "verdict", "ours", "theirs", "example_id"} <= set(row)


def test_a_code_task_run_logs_the_tamper_counts(small_cfg, tmp_path) -> None:
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    cfg = small_cfg
    cfg.task.name, cfg.task.prompt_template = "code_synthetic", None
    cfg.trainer.steps, cfg.evaluation.every = 1, 0
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer.train()
    finally:
        trainer.close()
    (metrics,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert {f"reward/tamper/{k}" for k in KINDS} <= set(metrics)
    assert undocumented(metrics) == []
    rows = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert rows and all(isinstance(r["tamper"], list) for r in rows)
    assert sum(bool(r["tamper"]) for r in rows) <= sum(metrics[f"reward/tamper/{k}"] for k in KINDS)
