"""The evaluation loop: generation through a rollout engine, caching and resume, errors, sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from benchmarks.config import EvalConfig
from benchmarks.evaluate import EngineSource, ScoringSettings, evaluate
from benchmarks.generation import sampling_config
from benchmarks.runner import benchmark_names, run
from reasoning_rl.tasks.data import load_problems
from reasoning_rl.tasks.definition import get_definition
from reasoning_rl.tasks.prompts import build_prompt, fewshot_pairs

ARITHMETIC = get_definition("arithmetic")


def engine_source(engine, n: int = 1) -> EngineSource:
    return EngineSource(engine=engine, sampling=sampling_config(0.0, 1.0, 0, 8), n=n,
                        build_prompt=lambda p: p.prompt, settings={"fake": True, "n": n})


def test_generation_caching_and_resume(tmp_path: Path, fake_engine, exact_match, inline_pool) -> None:
    problems, _ = load_problems(ARITHMETIC, limit=6)
    # The fake model answers the first 3 right, the rest "0" (wrong unless the answer is 0).
    answers = {p.prompt: [f"{p.reference}" if i < 3 else "0"] for i, p in enumerate(problems)}
    engine = fake_engine(answers)
    scoring = ScoringSettings(verifier=exact_match, key_data={"v": 1}, pool=inline_pool)

    first = evaluate(ARITHMETIC, problems[:4], engine_source(engine), scoring, tmp_path, show_progress=False)
    assert len(engine.prompts) == 4 and exact_match.calls == 4
    assert first["metrics"]["counts"]["correct"] == 3 + sum(p.reference == "0" for p in problems[3:4])

    # Same settings, two more problems: only those two are generated and scored.
    evaluate(ARITHMETIC, problems, engine_source(engine), scoring, tmp_path, show_progress=False)
    assert len(engine.prompts) == 6 and exact_match.calls == 6
    # Everything cached: nothing is generated or scored again.
    again = evaluate(ARITHMETIC, problems, engine_source(engine), scoring, tmp_path, show_progress=False)
    assert len(engine.prompts) == 6 and exact_match.calls == 6
    assert (again["this_run"]["problems_generated"], again["this_run"]["samples_scored"]) == (0, 0)
    assert [p["correct"] for p in again["problems"]][:3] == [[True]] * 3
    # A new verifier setting rescoring everything, but generates nothing.
    rescored = ScoringSettings(verifier=exact_match, key_data={"v": 2}, pool=inline_pool)
    evaluate(ARITHMETIC, problems, engine_source(engine), rescored, tmp_path, show_progress=False)
    assert len(engine.prompts) == 6 and exact_match.calls == 12
    # A smaller limit uses the cache and keeps the other problems' entries in it.
    evaluate(ARITHMETIC, problems[:2], engine_source(engine), rescored, tmp_path, show_progress=False)
    assert len(engine.prompts) == 6 and exact_match.calls == 12
    assert len((tmp_path / "problems.jsonl").read_text().splitlines()) == 6
    # overwrite=True redoes both.
    evaluate(ARITHMETIC, problems, engine_source(engine), rescored, tmp_path, overwrite=True, show_progress=False)
    assert len(engine.prompts) == 12 and exact_match.calls == 18

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["benchmark"] == {"name": "arithmetic", "version": ARITHMETIC.version, "description": ARITHMETIC.description}
    assert not list(tmp_path.glob(".*.tmp")), "atomic writes leave no temporary files"


def test_pass_at_k_and_maj_at_k_from_samples(tmp_path: Path, fake_engine, exact_match, inline_pool) -> None:
    problems, _ = load_problems(ARITHMETIC, limit=2)
    a, b = problems
    wrong_a, wrong_b = str(int(a.reference) + 1), str(int(b.reference) + 1)
    # problem a: samples right, wrong, wrong, wrong -> c=1 of n=4; majority (first 4) is wrong
    # problem b: samples wrong, right, right, wrong -> c=2 of n=4; first 3 vote right 2:1
    engine = fake_engine({a.prompt: [a.reference, wrong_a, wrong_a, wrong_a],
                          b.prompt: [wrong_b, b.reference, b.reference, wrong_b]})
    scoring = ScoringSettings(verifier=exact_match, key_data={}, pool=inline_pool)
    m = evaluate(ARITHMETIC, problems, engine_source(engine, n=4), scoring, tmp_path, k_values=[1, 2, 3],
                 show_progress=False)["metrics"]
    # accuracy: (1/4 + 2/4) / 2 = 0.375
    assert m["accuracy"]["value"] == pytest.approx(0.375)
    # pass@2: a: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5; b: 1 - C(2,2)/C(4,2) = 1 - 1/6 = 5/6; mean 2/3
    assert m["pass@2"]["value"] == pytest.approx((0.5 + 5 / 6) / 2)
    # maj@3: a votes wrong (first 3: right, wrong, wrong); b votes right (wrong, right, right): 1/2
    assert m["maj@3"]["value"] == pytest.approx(0.5)
    # maj@1 is the first sample: a right, b wrong
    assert m["maj@1"]["value"] == pytest.approx(0.5)


def test_prompts_fewshot_and_chat_template(shared_data_dir: Path) -> None:
    spec = get_definition("gsm8k")
    shots = fewshot_pairs(spec, 2, str(shared_data_dir))
    assert len(shots) == 2 and shots[0][1].rstrip().endswith("#### 72")
    raw = build_prompt("Q?", shots)
    assert raw.startswith(shots[0][0]) and raw.endswith("\n\nQ?")

    class ChatTokenizer:
        chat_template = "set"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert not tokenize and add_generation_prompt
            return " | ".join(f"{m['role']}: {m['content'][:3]}" for m in messages)

    assert build_prompt("Q?", shots[:1], ChatTokenizer(), chat_template=True, system_prompt="Sys") == \
        f"system: Sys | user: {shots[0][0][:3]} | assistant: {shots[0][1][:3]} | user: Q?"
    with pytest.raises(ValueError, match="no few-shot examples"):
        fewshot_pairs(get_definition("aime24"), 1)


def test_exactly_one_thing_to_evaluate(tmp_path: Path) -> None:
    from reasoning_rl.config_checks import ConfigError
    from reasoning_rl.errors import UserError

    with pytest.raises(ConfigError, match="exactly one of model=") as err:
        run(EvalConfig(benchmark="gsm8k", output_dir=str(tmp_path)))
    assert isinstance(err.value, UserError)


def test_shipped_config_composes_with_the_schema() -> None:
    from hydra import compose, initialize_config_module

    from benchmarks.cli import model_alias
    from benchmarks.config import register_configs

    register_configs()
    overrides = model_alias(["benchmark=gsm8k", "model=/ckpt/checkpoint-10", "limit=20", "k=[1,4]", "n=4"])
    with initialize_config_module(config_module="reasoning_rl.conf", version_base="1.3"):
        cfg = compose(config_name="eval", overrides=overrides)
    config = OmegaConf.to_object(cfg)
    assert isinstance(config, EvalConfig)
    assert (config.model_name_or_path, config.limit, config.k, config.n) == ("/ckpt/checkpoint-10", 20, [1, 4], 4)
    with initialize_config_module(config_module="reasoning_rl.conf", version_base="1.3"):
        several = OmegaConf.to_object(compose(config_name="eval", overrides=["benchmark=[gsm8k,math500]"]))
        assert benchmark_names(several.benchmark) == ["gsm8k", "math500"]
        with pytest.raises(Exception, match="limit"):
            compose(config_name="eval", overrides=["benchmark=gsm8k", "limit=abc"])


def test_checkpoint_sweep_writes_table_and_plot(tiny_run: Path, tmp_path: Path, has_math_verifier,
                                                monkeypatch) -> None:
    if not has_math_verifier:
        pytest.skip("the math verifier (rewards.math) is not available yet")
    config = EvalConfig(benchmark="arithmetic", run_dir=str(tiny_run), limit=3, max_new_tokens=4, device="cpu",
                        output_dir=str(tmp_path), progress=False)
    results = run(config)
    assert [r["model"]["step"] for r in results] == [5, 10]
    out = tmp_path / tiny_run.name
    table = (out / "sweep_arithmetic.md").read_text()
    assert "| 5 | checkpoint-5 |" in table and "| 10 | checkpoint-10 |" in table
    assert (out / "sweep_arithmetic.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "checkpoint-10" / "arithmetic" / "results.json").exists()
    assert f"arithmetic v{ARITHMETIC.version}" in (tmp_path / "summary.md").read_text()

    # Re-running the sweep finds everything cached and never loads the weights.
    def no_loading(*args, **kwargs):
        raise AssertionError("a fully cached re-run must not load the model")

    monkeypatch.setattr("reasoning_rl.policy.loading.load_pretrained", no_loading)
    again = run(config)
    assert [(r["this_run"]["problems_generated"], r["this_run"]["samples_scored"]) for r in again] == [(0, 0)] * 2
    assert [r["metrics"] for r in again] == [r["metrics"] for r in results]


def test_vllm_backend_without_vllm_says_how_to_install() -> None:
    pytest.importorskip("reasoning_rl.rollouts.sampling")
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vllm is installed here")
    from benchmarks.generation import load_engine

    with pytest.raises(ImportError, match=r"pip install 'reasoning-rl\[vllm\]'"):
        load_engine("vllm", "some/model")


def test_maj_equivalence_uses_the_verifier(has_math_verifier) -> None:
    if not has_math_verifier:
        pytest.skip("the math verifier (rewards.math) is not available yet")
    import rewards
    from benchmarks.runner import make_equivalence

    equivalence = make_equivalence(rewards.get_verifier("math"), timeout=20, pool=None)
    assert equivalence([("0.5", "\\frac{1}{2}"), ("2", "3")]) == {("0.5", "\\frac{1}{2}")}


def test_console_entry_point_scores_reference_samples(shared_data_dir: Path, tmp_path: Path, monkeypatch,
                                                      capsys, has_math_verifier) -> None:
    """``python -m benchmarks.samples`` writes the files; ``reasoning-rl-eval ... samples=`` scores them."""
    if not has_math_verifier:
        pytest.skip("the math verifier (rewards.math) is not available yet")
    from benchmarks.cli import eval_main
    from benchmarks.samples import main as samples_main

    assert samples_main(["aime24", str(tmp_path / "refs"), "--data-dir", str(shared_data_dir)]) == 0
    monkeypatch.setattr("sys.argv", ["reasoning-rl-eval", "benchmark=aime24", f"data_dir={shared_data_dir}",
                                     f"samples={tmp_path / 'refs' / 'aime24.reference.jsonl'}",
                                     f"output_dir={tmp_path / 'out'}", "progress=false"])
    eval_main()
    assert "aime24 v1 | samples:aime24.reference.jsonl | 30/30 correct on 30 problems" in capsys.readouterr().out
    results = json.loads((tmp_path / "out" / "samples--aime24.reference" / "aime24" / "results.json").read_text())
    assert results["dataset"]["num_problems"] == 30 and results["metrics"]["accuracy"]["value"] == 1.0


@pytest.mark.parametrize(("chat", "expected_stop"), [(False, ["\n"]), (True, [])])
def test_stop_strings_apply_to_raw_prompts_only(chat: bool, expected_stop: list[str], tmp_path: Path, fake_engine,
                                                has_math_verifier) -> None:
    if not has_math_verifier:
        pytest.skip("the math verifier (rewards.math) is not available yet")
    import dataclasses

    from benchmarks.runner import Evaluator

    class Tokenizer:
        chat_template = "set"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "<chat>" + messages[-1]["content"]

    spec = dataclasses.replace(ARITHMETIC, stop=("\n",))
    engine = fake_engine()
    evaluator = Evaluator(EvalConfig(benchmark="arithmetic", limit=2, chat_template=chat, progress=False,
                                     output_dir=str(tmp_path)))
    results = evaluator.run_model(spec, engine, Tokenizer(), "fake", tmp_path / "out")
    assert engine.samplings[0].stop == expected_stop
    assert all(p.startswith("<chat>") == chat for p in engine.prompts)
    assert results["model"]["generation"]["chat_template"] is chat


def test_maj_at_k_votes_by_completion_when_the_verifier_reports_no_answer(tmp_path: Path, fake_engine,
                                                                         inline_pool) -> None:
    """A plugin verifier returning ``VerifierResult.ok(score)`` without ``extracted``: maj@k used to be 0
    (every sample voted "no answer"); now the samples vote by their normalised completion text."""
    from rewards import VerifierResult

    def plain_ok(completion: str, reference, **fields) -> VerifierResult:
        return VerifierResult.ok(float(completion.strip() == str(reference)))

    problems, _ = load_problems(ARITHMETIC, limit=2)
    first, second = problems
    wrong = str(int(second.reference) + 1)
    # First: right, right, wrong, right (" x " normalised) -> the right answer wins 3-1: maj@4 = 1.
    # Second: right once, the same wrong answer 3 times -> maj@4 = 0. Mean 0.5; accuracy (3/4 + 1/4) / 2 = 0.5.
    engine = fake_engine({first.prompt: [first.reference, first.reference, "x", f" {first.reference} "],
                          second.prompt: [second.reference, wrong, wrong, wrong]})
    scoring = ScoringSettings(verifier=plain_ok, key_data={"v": "plain"}, pool=inline_pool)
    results = evaluate(ARITHMETIC, problems, engine_source(engine, n=4), scoring, tmp_path, k_values=[1, 4],
                       answer_equivalence=None, show_progress=False)
    assert results["metrics"]["accuracy"]["value"] == pytest.approx(0.5)
    assert results["metrics"]["maj@4"]["value"] == pytest.approx(0.5)
    assert results["maj_votes"] == {"extracted": 0, "completion": 8, "none": 0}
    from benchmarks.summary import result_line

    assert "maj@k: 8 samples vote by their completion text" in result_line(results)


def test_samples_without_an_answer_found_do_not_vote(tmp_path: Path, fake_engine, inline_pool) -> None:
    """A verifier that reports answers (the math verifier: ``ok(0, extracted=None)`` when it finds none):
    those samples do not vote, they never vote by their text. Three junk samples, one right answer:
    the right answer is the only vote, maj@4 = 1."""
    from rewards import VerifierResult

    def reporting(completion: str, reference, **fields) -> VerifierResult:
        if completion == "junk":
            return VerifierResult.ok(0.0, extracted=None, reason="no answer found in the completion")
        return VerifierResult.ok(float(completion == str(reference)), extracted=completion)

    problems, _ = load_problems(ARITHMETIC, limit=1)
    engine = fake_engine({problems[0].prompt: ["junk", "junk", "junk", problems[0].reference]})
    scoring = ScoringSettings(verifier=reporting, key_data={"v": "reporting"}, pool=inline_pool)
    results = evaluate(ARITHMETIC, problems, engine_source(engine, n=4), scoring, tmp_path, k_values=[4],
                       show_progress=False)
    assert results["metrics"]["maj@4"]["value"] == 1.0
    assert results["maj_votes"] == {"extracted": 1, "completion": 0, "none": 3}
