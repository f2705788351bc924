"""One correctness rule and one scoring function for training's held-out evaluation and the benchmarks."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.evaluate import EngineSource, ScoringSettings, evaluate
from benchmarks.generation import sampling_config
from benchmarks.runner import make_verifier
from reasoning_rl.evaluation.heldout import evaluate_heldout
from reasoning_rl.rollouts.sampling import Completion, SamplingConfig
from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task
from reasoning_rl.tasks.data import load_problems
from reasoning_rl.tasks.scoring import is_correct
from rewards import WorkerPool


@pytest.mark.parametrize(("score", "status", "expected"), [
    (1.0, "ok", True),
    (1.0 - 1e-12, "ok", True),    # float rounding of a full score
    (0.999, "ok", False),         # partial credit is not correct
    (0.0, "ok", False),
    (None, "unscorable", False),  # cannot score is never correct
    (None, "timeout", False),
    (1.0, "error", False),        # only status ok counts
])
def test_is_correct(score, status, expected) -> None:
    assert is_correct(score, status) is expected


class TableEngine:
    """Answers each prompt from a table, cycling through its answers for the n samples."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    def generate(self, prompts, n, sampling, seed=None):
        return [[Completion(text=self.answers[p][i % len(self.answers[p])], token_ids=[0], finish_reason="stop")
                 for i in range(n)]
                for p in prompts]


def test_held_out_accuracy_equals_the_benchmarks_on_the_same_completions(tmp_path: Path) -> None:
    task = Task(TaskConfig(max_eval_examples=6))
    examples = task.examples(task.eval_split)
    problems, _ = load_problems(task.definition, task.eval_split, limit=6)
    # problem i: the first sample right for i < 3, the second sample right for even i; all else wrong
    answers = {e.prompt: [e.reference if i < 3 else "-1", e.reference if i % 2 == 0 else "x"]
               for i, e in enumerate(examples)}
    engine = TableEngine(answers)
    pool = WorkerPool(num_workers=0)
    held_out = evaluate_heldout(engine, examples, task.reward(), SamplingConfig(max_new_tokens=4), 2, seed=0,
                                pool=pool)
    # greedy = first samples: 3 of 6 right; sampled: (3 + 3) of 12
    assert (held_out.greedy_accuracy, held_out.sampled_accuracy) == (0.5, 0.5)

    verifier, key = make_verifier(task.definition, {})
    for n, expected in ((1, held_out.greedy_accuracy), (2, held_out.sampled_accuracy)):
        source = EngineSource(engine=engine, sampling=sampling_config(0.0, 1.0, 0, 4), n=n,
                              build_prompt=lambda p: p.prompt, settings={"n": n})
        results = evaluate(task.definition, problems, source, ScoringSettings(verifier=verifier, key_data=key,
                                                                               pool=pool),
                           tmp_path / str(n), show_progress=False)
        assert results["metrics"]["accuracy"]["value"] == pytest.approx(expected)
