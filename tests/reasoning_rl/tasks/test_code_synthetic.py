"""The code_synthetic grid (10 operations x constants 1-99): 239 functions held out for good, the hidden
inputs tell every two different functions apart, an optional validation share of the training functions,
and the two operations added in version 2 graded by the sandboxed verifier with partial credit."""

from collections import defaultdict

import pytest

from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task
from reasoning_rl.tasks.code_synthetic import OPERATIONS, TEST_INPUTS, make_code_dataset
from rewards.pool import WorkerPool


def ids(split: str, **kwargs) -> list[str]:
    rows = make_code_dataset(4000 if split == "train" else 1000, 0, split, cycle=split == "train", **kwargs)
    return [r["id"] for r in rows]


def test_default_grid_holds_out_239_of_990_functions():
    train, test = set(ids("train")), ids("test")
    assert len(OPERATIONS) == 10
    assert len(test) == len(set(test)) == 239 and len(train) == 751 and not train & set(test)
    assert train | set(test) == {f"code_synthetic/{op}/{c}" for op in OPERATIONS for c in range(1, 100)}


def test_hidden_inputs_tell_every_two_different_functions_of_the_grid_apart():
    by_outputs = defaultdict(list)
    for op in OPERATIONS.values():
        for c in range(1, 100):
            by_outputs[tuple(op.fn(x, c) for x in TEST_INPUTS)].append((op, c))
    for same in by_outputs.values():
        op, c = same[0]
        everywhere = [op.fn(x, c) for x in range(-1000, 1001)]
        for op2, d in same[1:]:
            # agreeing on the hidden inputs is allowed only for the same function (x // 1 is x * 1)
            assert [op2.fn(x, d) for x in range(-1000, 1001)] == everywhere, (op.code, c, op2.code, d)
    # 997, the input before 9973, left x // 37 and x // 38 equal on every hidden input
    assert 997 // 37 == 997 // 38 and 9973 // 37 != 9973 // 38


def test_validation_takes_a_share_of_training_functions_and_leaves_test_alone():
    train, validation = set(ids("train", validation_fraction=0.2)), ids("validation", validation_fraction=0.2)
    assert len(validation) == len(set(validation)) == 165 and len(train) == 586
    assert train | set(validation) == set(ids("train")) and not train & set(validation)
    assert ids("test", validation_fraction=0.2) == ids("test")


def test_empty_validation_and_unknown_split_name_the_fix():
    with pytest.raises(ValueError, match=r"validation split is empty: .*validation_fraction=0.2"):
        make_code_dataset(10, 0, "validation")
    with pytest.raises(ValueError, match=r"split must be 'train', 'validation' or 'test', got 'dev'"):
        make_code_dataset(10, 0, "dev")


def test_new_operations_pass_their_reference_and_get_partial_credit():
    task = Task(TaskConfig(name="code_synthetic", max_eval_examples=None))
    examples = {e.id: e for e in task.examples("test")}
    dist, twice = examples["code_synthetic/absdiff/38"], examples["code_synthetic/twice/16"]
    assert dist.prompt == 'def f(x):\n    """Return the distance between x and 38."""\n    return '
    assert (dist.reference, twice.reference) == ("abs(x - 38)", "2 * x + 16")
    pool = WorkerPool(1)
    try:
        rewards = task.reward().score(
            [dist.reference, "x - 38", "38 - x", twice.reference, "x + 16"],
            [e.reference for e in (dist, dist, dist, twice, twice)], [e.fields for e in (dist, dist, dist, twice, twice)],
            timeout=60, pool=pool).rewards
    finally:
        pool.close()
    # x - 38 is right where x >= 38 (44, 9973), 38 - x where x <= 38 (the other 7), x + 16 only at x = 0
    assert rewards == pytest.approx([1.0, 2 / 9, 7 / 9, 1.0, 1 / 9])


def test_the_recipes_all_or_nothing_reward_pays_a_wrong_constant_nothing():
    from rewards.specs import RewardSpec

    partial = Task(TaskConfig(name="code_synthetic"))
    strict = Task(TaskConfig(name="code_synthetic", rewards=[RewardSpec(name="code", options={"partial_credit": False})]))
    e = next(e for e in partial.examples("train") if e.id == "code_synthetic/floordiv/82")
    pool = WorkerPool(1)
    try:
        got = [t.reward().score(["x // 46", "x // 82"], [e.reference] * 2, [e.fields] * 2, timeout=60, pool=pool).rewards
               for t in (partial, strict)]
    finally:
        pool.close()
    # x // 46 and x // 82 agree on every hidden input but 9973 (216 against 121): 8 of 9 tests
    assert got == [pytest.approx([8 / 9, 1.0]), [0.0, 1.0]]
