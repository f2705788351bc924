"""Reading a sweep's runs: one :class:`RunRecord` per run folder (its config, metrics, evaluations,
status and health), found under a sweep folder by :func:`find_runs`. Tables and plots are built from these
records (:mod:`reasoning_rl.reporting.report`, :mod:`reasoning_rl.reporting.plots`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reasoning_rl.health.summary import health_summary
from reasoning_rl.metric_means import finite as _finite
from reasoning_rl.metric_means import head_mean as _head_mean
from reasoning_rl.metric_means import mean as _mean
from reasoning_rl.metric_means import tail_mean as _tail_mean
from reasoning_rl.reporting.stats import COLLAPSE_FRACTION, collapse_reason
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.run_folder.status import read_status


@dataclass
class RunRecord:
    path: str
    setting: str
    seed: int | None
    status: str
    steps_done: int
    steps_total: int | None
    final_reward: float | None = None
    final_kl: float | None = None
    greedy_before: float | None = None
    greedy_after: float | None = None
    sampled_after: float | None = None
    tokens_per_s: float | None = None
    wall_s: float | None = None
    state_gb: float | None = None
    """Parameters + gradients + optimiser states of every model held (summary.json's memory)."""
    peak_rss_gb: float | None = None
    pass_before: dict[str, float] = field(default_factory=dict)
    """Held-out Pass@K before training, by K (``eval_before.json``'s ``pass@K``)."""
    pass_after: dict[str, float] = field(default_factory=dict)
    maj_before: dict[str, float] = field(default_factory=dict)
    """Held-out Maj@K before training, by K."""
    maj_after: dict[str, float] = field(default_factory=dict)
    audit_disagree_rate: float | None = None
    """Mean over steps of ``audit/disagree_rate`` (``task.audit``); None when the run logged no audit."""
    audit_ours_pass_theirs_fail: int | None = None
    """Sum over steps of ``audit/ours_pass_theirs_fail``: possible false positives of the reward."""
    audit_ours_fail_theirs_pass: int | None = None
    """Sum over steps of ``audit/ours_fail_theirs_pass``: possible false negatives of the reward."""
    retention_before: float | None = None
    """Held-out greedy accuracy on the second task before training (``evaluation.retention``), else None."""
    retention_after: float | None = None
    """The same after training."""
    collapsed: bool = False
    """The run collapsed (reasoning_rl.reporting.stats: non-finite loss, or accuracy / reward fell below a fraction)."""
    collapse_reason: str | None = None
    mismatch_log_rho: float | None = None
    """Mean over steps of ``mismatch/log_rho_abs_mean`` (None when the sampler reported no log-probs)."""
    mismatch_kl_k3: float | None = None
    """Mean over steps of ``mismatch/kl_k3``."""
    mismatch_ess: float | None = None
    """Mean over steps of ``mismatch/ess_fraction``."""
    mismatch_masked: float | None = None
    """Mean over steps of ``mismatch/masked_token_fraction`` (the correction's)."""
    mismatch_truncated: float | None = None
    """Mean over steps of ``mismatch/truncated_token_fraction`` (tis)."""
    error: str | None = None
    health: str | None = None
    """What the health rules said (reasoning_rl.health.summary): ``ok``, the rules fired, the preflight's findings."""
    values: dict[str, Any] = field(default_factory=dict)
    """Every config value, dotted (``algo.kl.beta``), for plotting against."""


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix.rstrip("."): node}
    out: dict[str, Any] = {}
    for k, v in node.items():
        out.update(_flatten(v, f"{prefix}{k}."))
    return out


def _audit(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """The verifier audit over the whole run: the mean per-step disagreement rate (steps where both
    verifiers scored something) and the two kinds of disagreement summed; empty without an audit."""
    rates = _finite(metrics, "audit/disagree_rate")
    if not rates and not _finite(metrics, "audit/samples"):
        return {}
    return {"audit_disagree_rate": sum(rates) / len(rates) if rates else None,
            **{f"audit_{k}": int(sum(_finite(metrics, f"audit/{k}")))
               for k in ("ours_pass_theirs_fail", "ours_fail_theirs_pass")}}


def _setting(run_dir: Path) -> str:
    """The settings the sweep varies, as the CLI named the run's folder (``<setting>/seed=<N>/``)."""
    return run_dir.parent.name if run_dir.name.startswith("seed=") else run_dir.name


def _at_k(evaluation: dict[str, Any], metric: str) -> dict[str, float]:
    """``{"1": .., "2": ..}`` from an evaluation's ``<metric>@K`` entries, by increasing K."""
    prefix = f"{metric}@"
    values = {k[len(prefix):]: v for k, v in evaluation.items() if k.startswith(prefix) and k[len(prefix):].isdigit()}
    return dict(sorted(values.items(), key=lambda kv: int(kv[0])))


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except json.JSONDecodeError:
        return None


def _collapse(metrics: list[dict[str, Any]], before: dict[str, Any], after: dict[str, Any],
              fraction: float) -> dict[str, Any]:
    losses = [m.get(k) for m in metrics for k in ("loss/total", "loss/policy") if isinstance(m.get(k), (int, float))]
    reason = collapse_reason(losses, before.get("greedy_accuracy"), after.get("greedy_accuracy"),
                             _head_mean(metrics, "reward/mean"), _tail_mean(metrics, "reward/mean"), fraction)
    return {"collapsed": reason is not None, "collapse_reason": reason}


def read_run(run_dir: Path, root: Path, collapse_fraction: float = COLLAPSE_FRACTION) -> RunRecord:
    """Everything the report says about one run folder (never raises on a partial folder)."""
    values = _flatten(yaml.safe_load((run_dir / "config.yaml").read_text()) or {})
    status = read_status(run_dir) or {}
    summary = _json(run_dir / "summary.json")
    metrics = read_metrics(run_dir / "metrics.jsonl")
    state = status.get("status")
    if state == "finished" and summary is not None:
        label = "finished"
    elif state == "failed":
        label = "failed"
    else:
        label = "incomplete"
    before, after = _json(run_dir / "eval_before.json") or {}, _json(run_dir / "eval_after.json") or {}
    wall = status.get("wall_s")
    if wall is None and metrics:
        wall = sum(m.get("time/step", 0.0) for m in metrics)
    throughput = [m["throughput/completion_tokens_per_s"] for m in metrics
                  if isinstance(m.get("throughput/completion_tokens_per_s"), (int, float))]
    return RunRecord(
        path=str(run_dir.relative_to(root)), setting=_setting(run_dir),
        seed=values.get("trainer.seed"), status=label,
        steps_done=max((m["step"] for m in metrics), default=0), steps_total=values.get("trainer.steps"),
        final_reward=_tail_mean(metrics, "reward/mean"), final_kl=_tail_mean(metrics, "kl/mean"),
        greedy_before=before.get("greedy_accuracy"), greedy_after=after.get("greedy_accuracy"),
        sampled_after=after.get("sampled_accuracy"),
        retention_before=before.get("retention/greedy_accuracy"), retention_after=after.get("retention/greedy_accuracy"),
        tokens_per_s=sum(throughput) / len(throughput) if throughput else None,
        wall_s=wall, state_gb=((summary or {}).get("memory") or {}).get("state_gb"),
        peak_rss_gb=((summary or {}).get("memory") or {}).get("peak_rss_gb"),
        pass_before=_at_k(before, "pass"), pass_after=_at_k(after, "pass"),
        maj_before=_at_k(before, "maj"), maj_after=_at_k(after, "maj"),
        error=" ".join((status.get("error") or "").split())[:200] if label == "failed" else None,
        health=health_summary(run_dir),
        values=values, **_audit(metrics), **_collapse(metrics, before, after, collapse_fraction),
        mismatch_log_rho=_mean(metrics, "mismatch/log_rho_abs_mean"), mismatch_kl_k3=_mean(metrics, "mismatch/kl_k3"),
        mismatch_ess=_mean(metrics, "mismatch/ess_fraction"),
        mismatch_masked=_mean(metrics, "mismatch/masked_token_fraction"),
        mismatch_truncated=_mean(metrics, "mismatch/truncated_token_fraction"),
    )


def find_runs(sweep_dir: Path, collapse_fraction: float = COLLAPSE_FRACTION) -> list[RunRecord]:
    """Every run folder under ``sweep_dir`` (a folder with the config.yaml the CLI writes)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"sweep folder {str(sweep_dir)!r} does not exist")
    runs = [read_run(p.parent, sweep_dir, collapse_fraction) for p in sorted(sweep_dir.rglob("config.yaml"))
            if "report" not in p.relative_to(sweep_dir).parts  # nor .hydra/, nor a replaced run's .replaced/
            and not any(part.startswith(".") for part in p.relative_to(sweep_dir).parts)]
    return sorted(runs, key=lambda r: (r.setting, r.seed if r.seed is not None else -1))
