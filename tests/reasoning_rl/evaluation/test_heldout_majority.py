"""Held-out Maj@K with a verifier that scores without reporting the answer it extracted (a plugin
returning ``VerifierResult.ok(score)`` alone): the samples vote by their completion text, not "no answer"."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from reasoning_rl.evaluation.heldout import evaluate_heldout
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.tasks import Example
from rewards import VerifierResult, WorkerPool, register_verifier, unregister_verifier
from rewards.compose import CompositeReward
from rewards.specs import RewardSpec

# Problem "a" (answer 7): samples "7", "7", "8", " 7 " -> "7" (3 votes, " 7 " normalised) beats "8": maj@4 = 1.
# Problem "b" (answer 1): samples "1", "2", "2", "2" -> "2" wins: maj@4 = 0.
# Maj@4 = (1 + 0) / 2 = 0.5 in every order of the 4 samples; pass@1 = (3/4 + 1/4) / 2 = 0.5.
SAMPLES = {"a": ["7", "7", "8", " 7 "], "b": ["1", "2", "2", "2"]}
REFERENCES = {"a": "7", "b": "1"}


def plain_ok(completion: str, reference: str, **fields) -> VerifierResult:
    return VerifierResult.ok(float(completion.strip() == reference))  # no `extracted`, no `pred`


@dataclass
class Text:
    text: str


class TableEngine:
    def generate(self, prompts, n, sampling, seed=None):
        return [[Text(t) for t in (SAMPLES[p] if sampling.do_sample else SAMPLES[p][:1])][:n] for p in prompts]


@pytest.fixture
def reward():
    register_verifier("t_plain_ok")(plain_ok)
    yield CompositeReward([RewardSpec(name="t_plain_ok")])
    unregister_verifier("t_plain_ok")


def test_maj_at_k_votes_by_completion_when_the_verifier_reports_no_answer(reward) -> None:
    examples = [Example(k, k, REFERENCES[k], {}) for k in SAMPLES]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=4)
    result = evaluate_heldout(TableEngine(), examples, reward, sampling, samples_per_problem=4, seed=0,
                              pool=WorkerPool(num_workers=0))
    assert result.pass_at[1] == pytest.approx(0.5)
    assert result.maj_at[4] == pytest.approx(0.5)  # was 0.0: every sample voted for "no answer"
    assert result.greedy_accuracy == 1.0  # the first sample of each: "7" and "1", both right
