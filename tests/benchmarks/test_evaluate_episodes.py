"""``reasoning-rl-eval ... env=code_feedback``: evaluation runs episodes with the environment and reports
accuracy, turns used, tool calls, tool errors, timeouts and accuracy within each number of turns."""

from __future__ import annotations

import json

import pytest

from benchmarks.evaluate import EngineSource, ScoringSettings, evaluate
from benchmarks.summary import episode_line
from reasoning_rl.envs import EpisodeConfig
from reasoning_rl.rollouts.sampling import Completion, cut_at_stop
from reasoning_rl.tasks.data import Problem
from reasoning_rl.tasks.definition import get_definition
from rewards import get_verifier
from tests.reasoning_rl.envs.conftest import build_bpe_tokenizer, char_ids


@pytest.fixture(scope="module")
def bpe_tokenizer():
    return build_bpe_tokenizer()


CHECK = "def check(candidate):\n" + "".join(f"    assert candidate({x}) == {x} + C\n" for x in (-7, 0, 8))


def problem(c: int) -> Problem:
    prompt = f'def f(x):\n    """Return x plus {c}."""\n    return '
    return Problem(f"p{c}", prompt, f"x + {c}", {"prompt": prompt, "test": CHECK.replace("C", str(c)),
                                                   "entry_point": "f"})


class ContextPolicy:
    """Answers from what the context says: "x plus 3" right at once; "x plus 5" wrong (x + 4), then
    right after feedback; "x plus 7" wrong twice (x * 7)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def generate_from_ids(self, prompt_ids, sampling, seed=None):
        out = []
        for ids in prompt_ids:
            context = self.tokenizer.decode(ids)
            retry = "# " in context
            text = ("x + 3\n" if "plus 3" in context else "x * 7\n" if "plus 7" in context
                    else "x + 5\n" if retry else "x + 4\n")
            new = char_ids(self.tokenizer, text)
            new, decoded, _ = cut_at_stop(new, self.tokenizer.decode(new), sampling.stop, self.tokenizer)
            out.append(Completion(decoded, new, "stop", list(ids), 0, [-1.0] * len(new)))
        return out


def test_evaluation_runs_episodes_and_reports_turns_and_tool_use(bpe_tokenizer, tmp_path):
    spec = get_definition("code_synthetic_feedback", kind="benchmark")
    source = EngineSource(engine=ContextPolicy(bpe_tokenizer), sampling=_greedy(), n=1,
                          build_prompt=lambda p: p.prompt, settings={"env": "code_feedback"},
                          env="code_feedback", episode=EpisodeConfig(max_turns=2, max_tokens=1000),
                          tokenizer=bpe_tokenizer)
    scoring = ScoringSettings(verifier=get_verifier("code", extract="raw", partial_credit=True),
                              key_data={"name": "code"})
    result = evaluate(spec, [problem(3), problem(5), problem(7)], source, scoring, tmp_path, show_progress=False)
    # Scored on the final attempt: p3 right at once, p5 right at the second attempt, p7 wrong twice.
    assert [p["correct"] for p in result["problems"]] == [[True], [True], [False]]
    assert result["metrics"]["accuracy"]["value"] == pytest.approx(2 / 3)
    e = result["episodes"]
    assert e["episodes"] == 3
    assert e["turns_mean"] == pytest.approx(5 / 3)          # 1 + 2 + 2 attempts
    assert e["tool_calls_mean"] == pytest.approx(5 / 3)     # every attempt ran against the tests
    assert e["tool_error_rate"] == pytest.approx(3 / 5)     # p5's first, p7's two failed
    assert e["tool_timeouts"] == 0 and e["budget_cut_fraction"] == 0
    assert e["accuracy_within_turns"]["1"]["value"] == pytest.approx(1 / 3)  # the first-attempt pass rate
    assert e["accuracy_within_turns"]["2"]["value"] == pytest.approx(2 / 3)  # after the second attempt
    # The cache keeps each episode whole; the scored completion is its final attempt.
    [_, p5, _] = [json.loads(line) for line in (tmp_path / "problems.jsonl").read_text().splitlines()]
    assert p5["completions"] == ["x + 5\n"]
    assert p5["episodes"][0]["text"].startswith("x + 4\n# 0 of 3 tests passed\n# test 1: f(-7) returned -3, expected -2\n")
    assert "<= 1 turns 33.33" in episode_line(result) and "tool errors 60.0%" in episode_line(result)


def _greedy():
    from benchmarks.generation import sampling_config

    return sampling_config(0.0, 1.0, 0, 12, ["\n"])


def test_the_eval_command_runs_a_checkpoint_with_the_environment(tiny_run, tmp_path, capsys):
    from benchmarks.config import EvalConfig
    from benchmarks.runner import run

    cfg = EvalConfig(benchmark="code_synthetic_feedback", model_name_or_path=str(tiny_run / "checkpoint-5"),
                     env="code_feedback", episode=EpisodeConfig(max_turns=2, max_tokens=48), limit=3,
                     max_new_tokens=6, allow_code_execution=True, score_workers=1, backend="hf", device="cpu",
                     output_dir=str(tmp_path / "eval"), progress=False)
    [result] = run(cfg)
    e = result["episodes"]
    assert e["episodes"] == 3 and 1 <= e["turns_mean"] <= 2 and set(e["accuracy_within_turns"]) <= {"1", "2"}
    assert result["model"]["generation"]["env"] == "code_feedback"  # part of the cache key
    assert "  episodes: " in capsys.readouterr().out
