"""The batch every sampling algorithm builds alike (reasoning_rl.algo.batch)."""

from types import SimpleNamespace

import pytest
import torch

from reasoning_rl.algo import batch as batch_module
from reasoning_rl.algo.batch import (
    micro_batching,
    rows_with_gradient,
    sample_step,
    sampled_support,
    step_seed,
    trained_tokens,
    training_rows,
)
from reasoning_rl.algo.groups import ScoredGroups
from reasoning_rl.rollouts.prompt_sampler import PromptSampler
from reasoning_rl.rollouts.sampling import Completion, SamplingConfig


def test_the_step_seed_is_the_run_seed_times_a_prime_plus_the_step():
    assert step_seed(0, 7) == 7
    assert step_seed(2, 5) == 2 * 1_000_003 + 5  # 2_000_011
    assert len({step_seed(s, k) for s in range(3) for k in range(1000)}) == 3000  # no two meet


def test_an_empty_completion_is_trained_as_its_eos():
    assert trained_tokens([], eos_token_id=9) == [9]
    assert trained_tokens((4, 5), eos_token_id=9) == [4, 5]


def _completion(prompt, tokens):
    return Completion(text="", token_ids=list(tokens), finish_reason="stop", prompt_token_ids=list(prompt))


def test_training_rows_are_prompt_major_with_empty_completions_as_eos():
    groups = ScoredGroups(examples=[], completions=[_completion([1, 2], [3]), _completion([1, 2], []),
                                                    _completion([7], [8, 8])],
                          rewards=torch.zeros(3, 1), components={}, verifier_failures={})
    rows = training_rows(groups, eos_token_id=0)
    assert rows.prompts == [[1, 2], [1, 2], [7]]
    assert rows.completions == [[3], [0], [8, 8]]
    assert rows.lengths() == [1, 1, 2] and len(rows) == 3


def test_the_log_probs_take_the_support_the_engine_sampled_from():
    sampling = SamplingConfig(max_new_tokens=4, top_k=5, top_p=0.9)
    assert sampled_support(sampling) == {"top_k": 5, "top_p": 0.9}


def test_sample_step_draws_the_samplers_next_prompts_with_the_given_seed(monkeypatch):
    calls = []

    def fake_sample_and_score(ctx, examples, n, seed):
        calls.append((examples, n, seed))
        return "scored"

    monkeypatch.setattr(batch_module, "sample_and_score", fake_sample_and_score)
    sampler, twin = PromptSampler(10, seed=3), PromptSampler(10, seed=3)
    ctx = SimpleNamespace(sampler=sampler, train_examples=[f"e{i}" for i in range(10)])
    indices, scored = sample_step(ctx, prompts=4, group_size=2, seed=step_seed(3, 1))
    assert indices == twin.next(4)  # the sampler advanced by exactly 4
    assert scored == "scored"
    assert calls == [([f"e{i}" for i in indices], 2, 3_000_010)]


@pytest.mark.parametrize(("m", "g", "shared", "rows", "shared_rows", "note"), [
    (8, 4, True, 8, 4, None),           # whole groups: each prompt once per group (as before)
    (2, 4, True, 2, 2, "once per 2 rows"),  # half a group a pass: rows 0-1, 2-3 share a prompt
    (6, 4, True, 6, 2, "once per 2 rows"),  # 6 = 4 + 2: gcd 2, blocks of 2 never straddle a group
    (3, 4, True, 3, 1, "steps aside"),  # gcd 1: a pass may hold rows of two prompts in any pattern
    (3, 4, False, 3, 1, None),          # algo.shared_prompt_forward=false: nothing to say
    (5, 1, True, 5, 1, None),           # G = 1 (PPO-like): nothing to share
])
def test_micro_batches_of_any_size_share_prompts_where_they_can(m, g, shared, rows, shared_rows, note):
    plan = micro_batching(m, g, shared)
    assert (plan.rows, plan.shared_rows) == (rows, shared_rows)
    assert (plan.note is None) if note is None else (note in plan.note)
    # Every block of shared_rows rows of every micro-batch lies inside one group (16 rows = 4 groups).
    for start in range(0, 16, plan.rows):
        for block in range(start, min(16, start + plan.rows), plan.shared_rows):
            assert block // g == (block + plan.shared_rows - 1) // g


def test_rows_with_gradient_keeps_whole_groups_with_a_nonzero_advantage():
    """G = 4: a flat group, a group with one zero advantage among nonzero ones (kept whole, so its rows still
    share their prompt), and the paper's group."""
    advantages = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.5, 0.0, -0.5, 0.0, 1.0, -1.0, 1.0, -1.0])
    assert rows_with_gradient(advantages, 4) == [4, 5, 6, 7, 8, 9, 10, 11]
    assert rows_with_gradient(torch.zeros(8), 4) == []
