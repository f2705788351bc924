"""Fixtures for the evaluation-harness tests: verifiers, a fake rollout engine, tiny checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rewards import VerifierNotFoundError, VerifierResult, WorkerPool, get_verifier


def has_verifier(name: str) -> bool:
    """True once ``rewards.<name>`` can be imported and registers its verifier."""
    try:
        get_verifier(name)
    except (ImportError, VerifierNotFoundError):
        return False
    except TypeError:  # it exists but needs options
        return True
    return True


@pytest.fixture(scope="session")
def has_math_verifier() -> bool:
    return has_verifier("math")


@pytest.fixture(scope="session")
def has_code_verifier() -> bool:
    return has_verifier("code")


@pytest.fixture(scope="session")
def inline_pool() -> WorkerPool:
    """Runs verifier calls in the test process (no timeout): for stand-in verifiers and call counting."""
    return WorkerPool(num_workers=0)


class ExactMatch:
    """Stand-in verifier: 1.0 when the completion's last ``\\boxed{}`` (or last word) equals the reference."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, completion: str, reference: Any, **fields: Any) -> VerifierResult:
        from reasoning_rl.tasks.extractors import ReferenceExtractionError, last_boxed

        self.calls += 1
        try:
            pred = last_boxed(completion)
        except ReferenceExtractionError:
            words = completion.split()
            pred = words[-1] if words else None
        return VerifierResult.ok(float(pred == str(reference)), pred=pred)


@pytest.fixture
def exact_match() -> ExactMatch:
    return ExactMatch()


@dataclass
class FakeCompletion:
    text: str
    token_ids: list[int]
    finish_reason: str = "stop"


class FakeEngine:
    """Same ``generate`` signature as the rollout engines; answers from a table, records its prompts."""

    def __init__(self, answers: dict[str, list[str]] | None = None, default: str = "\\boxed{0}") -> None:
        self.answers = answers or {}
        self.default = default
        self.prompts: list[str] = []
        self.samplings: list[Any] = []

    def generate(self, prompts: list[str], n: int, sampling: Any, seed: int | None = None) -> list[list[FakeCompletion]]:
        self.prompts.extend(prompts)
        self.samplings.append(sampling)
        out = []
        for p in prompts:
            texts = self.answers.get(p, [self.default] * n)
            out.append([FakeCompletion(texts[i % len(texts)], [0]) for i in range(n)])
        return out


@pytest.fixture
def fake_engine() -> type[FakeEngine]:
    """The :class:`FakeEngine` class (tests build it with their own answer tables)."""
    return FakeEngine


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training-run folder with two tiny checkpoints (``checkpoint-5``, ``checkpoint-10``) and config.yaml."""
    models = pytest.importorskip("reasoning_rl.policy.loading")
    if not hasattr(models, "build_tiny_model"):
        pytest.skip("reasoning_rl.policy.loading.build_tiny_model is not available yet")
    run = tmp_path_factory.mktemp("run")
    for step in (5, 10):
        cfg = models.TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, init_seed=step)
        model, tokenizer = models.build_tiny_model(cfg)
        model.save_pretrained(run / f"checkpoint-{step}")
        tokenizer.save_pretrained(run / f"checkpoint-{step}")
    (run / "config.yaml").write_text("# training config of the tiny test run\n")
    return run
