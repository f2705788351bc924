"""The health rules: one table of the known silent failures of an RL run, each read off the metrics.

A rule reads one value per step from the metrics it names (their sum; a key ending in ``/*``
stands for every key under it), keeps the values of the steps that logged any of them, and
*fires* when its test holds on that history; it *clears* at the first later step where the test
no longer holds. The tests (``TESTS``), with ``v`` the rule's values and ``w`` its window:

    above      mean(v[-w:]) > threshold                     (a share or a level that is too high)
    below      mean(v[-w:]) < threshold                     (a level that is too low)
    grows      mean(v[-w:]) > threshold * mean(v[:w])       (runs away from where the run began)
    falls      mean(v[-w:]) < threshold * mean(v[:w])       (collapses from where the run began)
    spike      v[-1] > threshold * median(v[-w-1:-1])       (one step far above the recent ones)
    non_finite v[-1] is NaN or infinite                     (w = 1)

``above``/``below``/``grows``/``falls`` wait for a full window (``grows``/``falls`` for two:
the first is the baseline), so a rule never fires on the noise of the first steps. The defaults
are chosen so that the README's default run and ``task=code_synthetic`` raise none (docs/health.md
says what was measured); each can be changed with ``trainer.health.thresholds.<rule>=<value>``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reasoning_rl.settings.trainer import RULE_THRESHOLDS

DOCS = "docs/health.md"


@dataclass(frozen=True)
class Rule:
    """One health rule: a row of :data:`RULES`."""

    name: str
    """What ``trainer.health.stop_on``, ``.disable`` and ``.thresholds`` call it; the cause ``health:<name>``."""
    keys: tuple[str, ...]
    """The metrics it reads, summed; ``reward/tamper/*`` = every key under ``reward/tamper/``."""
    test: str
    """A name of :data:`TESTS`."""
    threshold: float
    window: int
    """Steps (that logged the keys) the test averages over."""
    advice: str
    """One line: what it means and which setting to change."""
    unless_rises: str | None = None
    """A counter metric: a step at which it rose is not read (fp16 loss scaling skips the steps whose
    gradients are infinite by design, and counts them in ``precision/skipped_steps``)."""

    @property
    def doc(self) -> str:
        return f"{DOCS}#{self.name}"


def _mean_last(v: Sequence[float], w: int) -> float | None:
    return statistics.fmean(v[-w:]) if len(v) >= w else None


def _above(v: Sequence[float], threshold: float, w: int) -> float | None:
    m = _mean_last(v, w)
    return m if m is not None and m > threshold else None


def _below(v: Sequence[float], threshold: float, w: int) -> float | None:
    m = _mean_last(v, w)
    return m if m is not None and m < threshold else None


def _relative(v: Sequence[float], w: int) -> float | None:
    """mean(v[-w:]) / mean(v[:w]) once two windows were logged; None before (or on a zero baseline)."""
    if len(v) < 2 * w:
        return None
    base = statistics.fmean(v[:w])
    return statistics.fmean(v[-w:]) / base if base > 0 else None


def _grows(v: Sequence[float], threshold: float, w: int) -> float | None:
    r = _relative(v, w)
    return r if r is not None and r > threshold else None


def _falls(v: Sequence[float], threshold: float, w: int) -> float | None:
    r = _relative(v, w)
    return r if r is not None and r < threshold else None


def _spike(v: Sequence[float], threshold: float, w: int) -> float | None:
    if len(v) <= w or not math.isfinite(v[-1]):
        return None
    median = statistics.median(v[-w - 1:-1])
    return v[-1] / median if median > 0 and v[-1] > threshold * median else None


def _non_finite(v: Sequence[float], threshold: float, w: int) -> float | None:
    return v[-1] if v and not math.isfinite(v[-1]) else None


TESTS: dict[str, Callable[[Sequence[float], float, int], float | None]] = {
    "above": _above, "below": _below, "grows": _grows, "falls": _falls, "spike": _spike, "non_finite": _non_finite,
}
"""Test name -> f(values, threshold, window): the measured value (mean, ratio or last value) when the rule
fires, None when it does not."""


RULES: tuple[Rule, ...] = (
    Rule("non_finite", ("loss/total", "loss/policy", "loss/value", "grad/norm", "grad/critic_norm"), "non_finite",
         RULE_THRESHOLDS["non_finite"], 1, "a loss or gradient norm is NaN/inf: the weights are lost from here on; lower algo.learning_rate, "
         "use trainer.precision=fp32, resume from the last checkpoint", unless_rises="precision/skipped_steps"),
    Rule("truncation", ("completion/truncated_fraction",), "above", RULE_THRESHOLDS["truncation"], 10,
         "over half the completions hit rollout.max_new_tokens, and a cut answer often scores 0: raise "
         "rollout.max_new_tokens or ask for shorter answers in task.prompt_template"),
    Rule("zero_variance", ("groups/zero_std_fraction",), "above", RULE_THRESHOLDS["zero_variance"], 20,
         "nearly every group has one reward for all its samples, so its advantage and loss are 0: the task is "
         "too hard or too easy for the policy; try warmstart.enabled=true, a larger algo.group_size or easier data"),
    Rule("reward_constant", ("reward/std",), "below", RULE_THRESHOLDS["reward_constant"], 20,
         "every completion of the batch gets the same reward: check the verifier on a few completions "
         "(completions.jsonl) and the task's answer format"),
    Rule("unscorable", ("reward/unscorable_fraction",), "above", RULE_THRESHOLDS["unscorable"], 10,
         "the verifier cannot score over half the completions (no parsable answer, timeouts): check "
         "task.prompt_template's answer format and rollout.reward_timeout"),
    Rule("entropy_collapse", ("entropy/mean",), "falls", RULE_THRESHOLDS["entropy_collapse"], 10,
         "the policy's entropy fell below 10% of its start: it samples one answer and stops exploring; raise "
         "rollout.temperature, try algo.entropy_control.name=clip_cov or lower algo.learning_rate"),
    Rule("entropy_explosion", ("entropy/mean",), "grows", RULE_THRESHOLDS["entropy_explosion"], 10,
         "the policy's entropy grew over 5x its start: its samples are drifting to noise; lower "
         "algo.learning_rate or raise algo.kl.beta"),
    Rule("kl_runaway", ("kl/mean",), "above", RULE_THRESHOLDS["kl_runaway"], 10,
         "the KL to the reference averages over 5 nats per token: the policy has left the reference; raise "
         "algo.kl.beta or lower algo.learning_rate"),
    Rule("mismatch_rising", ("mismatch/kl_k3", "rollout/logprob_mismatch_mean"), "above", RULE_THRESHOLDS["mismatch_rising"], 10,
         "the sampler's and the trainer's log-probs disagree (KL over 0.05 per token): the update is off-policy; "
         "check the rollout's precision, rollout.max_staleness and rollout.inject (docs/offpolicy.md)"),
    Rule("clip_saturated", ("clip/low_fraction", "clip/high_fraction"), "above", RULE_THRESHOLDS["clip_saturated"], 10,
         "over half the tokens are clipped: the policy moves too far per update; lower algo.learning_rate "
         "or algo.num_iterations, or tighten algo.policy_loss.eps_low/eps_high only on purpose"),
    Rule("grad_spike", ("grad/norm",), "spike", RULE_THRESHOLDS["grad_spike"], 20,
         "the gradient norm jumped over 20x its recent median: one batch dominated the update; check "
         "that step's completions in completions.jsonl; algo.max_grad_norm bounds the update"),
    Rule("length_runaway", ("completion/length_mean",), "grows", RULE_THRESHOLDS["length_runaway"], 10,
         "the mean completion length grew over 4x its start: the policy pads its answers; check the reward "
         "for a length bias (docs/rewards.md)"),
    Rule("tamper", ("reward/tamper/*",), "above", RULE_THRESHOLDS["tamper"], 5,
         "the sandbox flagged completions that tamper with the verifier: read reward/tamper/* and the "
         "flagged completions in completions.jsonl before trusting the reward"),
    Rule("audit_disagreement", ("audit/disagree_rate",), "above", RULE_THRESHOLDS["audit_disagreement"], 10,
         "the audit verifier disagrees with the reward on over 10% of samples: read audit.jsonl before "
         "trusting the reward"),
)
"""Every health rule, in the order they are checked and documented (docs/health.md)."""

RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)


def read_value(rule: Rule, metrics: Mapping[str, Any]) -> float | None:
    """The rule's value at one step: the sum of its keys that the step logged; None when it logged none.
    A key present with no value (``None``: metrics.jsonl's NaN/inf) or a non-finite one makes it NaN."""
    total, seen = 0.0, False
    for key in rule.keys:
        matched = ([v for k, v in metrics.items() if k.startswith(key[:-1])] if key.endswith("/*")
                   else [metrics[key]] if key in metrics else [])
        for value in matched:
            if value is None:
                value = float("nan")
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            seen = True
            total += float(value)
    return total if seen else None


def with_thresholds(overrides: Mapping[str, float], rules: Sequence[Rule] = RULES) -> tuple[Rule, ...]:
    """``rules`` with the thresholds of ``overrides`` (rule name -> threshold)."""
    from dataclasses import replace

    return tuple(replace(r, threshold=float(overrides[r.name])) if r.name in overrides else r for r in rules)
