"""Weighted composition of reward components and the None policies."""

import pytest

from rewards import CompositeReward, RewardSpec, WorkerPool, combine_scores


def test_weighted_sum():
    # 1.0 * 1.0 + 0.5 * 0.0 - 0.25 * 1.0 = 0.75
    assert combine_scores([1.0, 0.0, 1.0], [1.0, 0.5, -0.25]) == pytest.approx(0.75)


@pytest.mark.parametrize(
    "policy, expected",
    [
        ("propagate", None),  # any None -> None
        ("skip", 0.5),        # 0.5 * 1.0 from the component that scored; weights not renormalised
        ("zero", 0.5),        # None counts as 0
    ],
)
def test_none_policies(policy, expected):
    assert combine_scores([None, 1.0], [1.0, 0.5], policy) == expected


def test_all_none_is_none_under_skip_but_zero_under_zero():
    assert combine_scores([None, None], [1.0, 1.0], "skip") is None
    assert combine_scores([None, None], [1.0, 1.0], "zero") == 0.0


def test_unknown_policy():
    with pytest.raises(ValueError, match="none_policy"):
        combine_scores([1.0], [1.0], "average")


def test_composite_reward_scores_each_component():
    specs = [RewardSpec("format", 1.0, {"style": "boxed"}, label="boxed"),
             RewardSpec("overlong", 0.5, {"max_length": 10, "buffer": 5, "unit": "chars"})]
    with WorkerPool(1) as pool:
        out = CompositeReward(specs).score([r"\boxed{1}", "x" * 20], [None, None], pool=pool)
    # "\boxed{1}" has 9 chars: format 1, overlong (5 - 9)/5 = -0.8 -> 1 + 0.5 * -0.8 = 0.6
    # 20 chars: format 0, overlong -1 -> -0.5
    assert out.rewards == pytest.approx([0.6, -0.5])
    assert set(out.components) == {"boxed", "overlong"}


def test_duplicate_labels_rejected():
    with pytest.raises(ValueError, match="distinct labels"):
        CompositeReward([RewardSpec("format"), RewardSpec("format")])


def test_a_weight_zero_component_is_measured_not_rewarded():
    from rewards.compose import combine_scores

    # accuracy logged with weight 0 (None: unscorable) next to a format reward of 1 with weight 1
    assert combine_scores([None, 1.0], [0.0, 1.0], "propagate") == 1.0
    assert combine_scores([1.0, None], [0.0, 1.0], "propagate") is None
    assert combine_scores([1.0, 0.5], [0.0, 2.0], "skip") == 1.0
