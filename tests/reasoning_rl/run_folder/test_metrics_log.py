"""reward_curve.png: one panel per group of metrics the run logged (reasoning_rl.run_folder.metrics_log)."""

from reasoning_rl.run_folder.metrics_log import (
    DASHBOARD,
    dashboard_panels,
    plot_training_curves,
    with_heldout_ends,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _grpo_like(steps=60, eval_every=10, kl_every=5):
    out = []
    for s in range(1, steps + 1):
        m = {"step": s, "reward/mean": s / steps, "accuracy/train": s / steps, "kl/mean": 0.001 * s,
             "entropy/mean": 2.0 - s / steps, "completion/length_mean": 5.0, "completion/length_max": 8,
             "clip/low_fraction": 0.01, "clip/high_fraction": 0.02}
        if s % eval_every == 0:
            m["eval/greedy_accuracy"] = 0.5
        if s % kl_every == 0:
            m["kl/base_forward"] = 0.002 * s
        out.append(m)
    return out


def test_grpo_run_gets_every_panel_but_the_other_algorithms():
    titles = [t for t, _ in dashboard_panels(_grpo_like())]
    assert titles == ["reward and train accuracy", "held-out accuracy", "KL per token", "entropy per token",
                      "completion length (tokens)", "clip fraction"]
    held_out = dict(dashboard_panels(_grpo_like()))["held-out accuracy"]
    assert [k for k, _ in held_out] == ["eval/greedy_accuracy"]  # sampled accuracy was not logged: no line


def test_a_subset_of_metrics_draws_only_its_panels(tmp_path):
    # An SFT-like run: no KL, entropy or clip keys; a key present only as null counts as absent.
    metrics = [{"step": s, "reward/mean": 0.1 * s, "nll/token_mean": 1.0 / s, "kl/mean": None} for s in range(1, 6)]
    assert [t for t, _ in dashboard_panels(metrics)] == ["reward and train accuracy", "NLL per token"]
    path = plot_training_curves(metrics, tmp_path / "reward_curve.png")
    assert path == tmp_path / "reward_curve.png" and path.read_bytes().startswith(PNG_MAGIC)


def test_full_run_is_drawn_and_nothing_known_means_no_file(tmp_path):
    assert plot_training_curves(_grpo_like(), tmp_path / "a.png").read_bytes().startswith(PNG_MAGIC)
    assert plot_training_curves([{"step": 1, "made/up": 1.0}], tmp_path / "b.png") is None
    assert not (tmp_path / "b.png").exists()
    assert len({p.title for p in DASHBOARD}) == len(DASHBOARD)


def test_heldout_before_and_after_become_the_panels_ends():
    metrics = [{"step": 1, "reward/mean": 0.0}, {"step": 2, "reward/mean": 0.5, "eval/greedy_accuracy": 0.4}]
    before, after = {"greedy_accuracy": 0.1}, {"greedy_accuracy": 0.4}
    # evaluation.every logged step 2 already: only the before row (step 0) is added
    assert with_heldout_ends(metrics, before, after, last_step=2) == [
        {"step": 0, "eval/greedy_accuracy": 0.1}, *metrics]
    # without evaluation.every: before at 0 and after at the last step
    plain = [{"step": 1, "reward/mean": 0.0}, {"step": 2, "reward/mean": 0.5}]
    rows = with_heldout_ends(plain, before, after, last_step=2)
    assert [(m["step"], m.get("eval/greedy_accuracy")) for m in rows] == [(0, 0.1), (1, None), (2, None), (2, 0.4)]
    assert [t for t, _ in dashboard_panels(rows)] == ["reward and train accuracy", "held-out accuracy"]


def test_retention_joins_the_heldout_panel_when_it_ran():
    # evaluation.retention: eval_before/after.json carry retention/* keys, drawn beside the task's own accuracy
    before = {"greedy_accuracy": 0.2, "retention/greedy_accuracy": 0.05}
    after = {"greedy_accuracy": 0.5, "retention/greedy_accuracy": 0.03}
    rows = with_heldout_ends([{"step": 1, "reward/mean": 0.0}], before, after, last_step=1)
    held_out = dict(dashboard_panels(rows))["held-out accuracy"]
    assert [k for k, _ in held_out] == ["eval/greedy_accuracy", "eval/retention/greedy_accuracy"]


def test_health_marks_name_a_fired_rule_on_the_panels_of_its_keys_and_mark_its_step_on_all():
    from reasoning_rl.run_folder.metrics_log import dashboard_panels, health_marks

    present = dashboard_panels([{"step": 1, "reward/mean": 0.5, "kl/mean": 0.1, "entropy/mean": 1.0}])
    rows = [{"step": 30, "rule": "kl_runaway", "event": "fired", "keys": ["kl/mean"]},
            {"step": 40, "rule": "kl_runaway", "event": "cleared", "keys": ["kl/mean"]},
            {"step": 50, "rule": "truncation", "event": "fired", "keys": ["completion/truncated_fraction"]}]
    assert [title for title, _ in present] == ["reward and train accuracy", "KL per token", "entropy per token"]
    assert health_marks(rows, present) == [[(30, None), (50, "truncation")],  # no panel draws truncation: the first
                                           [(30, "kl_runaway"), (50, None)],
                                           [(30, None), (50, None)]]


def test_the_dashboard_draws_the_health_jsonl_beside_it(tmp_path):
    import json

    from reasoning_rl.run_folder.metrics_log import plot_training_curves

    metrics = [{"step": s, "reward/mean": s / 10, "kl/mean": 0.01 * s} for s in range(1, 11)]
    plain = plot_training_curves(metrics, tmp_path / "plain" / "reward_curve.png").read_bytes()
    (tmp_path / "marked").mkdir()
    (tmp_path / "marked" / "health.jsonl").write_text(json.dumps(
        {"step": 5, "rule": "kl_runaway", "event": "fired", "keys": ["kl/mean"]}) + "\n")
    marked = plot_training_curves(metrics, tmp_path / "marked" / "reward_curve.png").read_bytes()
    assert marked != plain
