"""rollout.stop_settled: when cut_at_stop's cut can no longer move, whatever text follows."""

import random

import pytest

from reasoning_rl.rollouts.sampling import stop_settled


@pytest.mark.parametrize("text, stops, lookahead, expected", [
    ("x = 1\n", ["\n"], 0, True),  # the stop string is there, nothing can begin before it
    ("x = 1", ["\n"], 0, False),  # none yet
    ("abc```out", ["```output"], 0, False),  # a prefix of it ends the text: not complete
    ("abc```output", ["```output"], 0, True),
    # "b" at 1, but "ab" (a proper prefix of "abc") ends the text at 0 < 1: "abc" may still begin at 0
    ("ab", ["b", "abc"], 0, False),
    ("abd", ["b", "abc"], 0, True),  # it did not: cut at 1
    ("abc", ["b", "abc"], 0, True),  # it did: cut at 0
    ("bab", ["b", "abc"], 0, True),  # "b" at 0; "ab" ends the text at 1, after the cut: no matter
    ("xb\ufffd", ["b"], 0, False),  # an incomplete character at the end: wait for it
    ("xb\ufffdy", ["b"], 0, True),  # one inside the text stays as it is
    ("xb", ["", "b"], 0, True),  # the empty string never counts
    ("xb", [""], 0, False),
    # lookahead k: the text must run longest + k characters past the cut (the last k may still change)
    ("xb" + "y" * 3, ["b"], 4, False),  # 4 characters from the cut, 1 + 4 = 5 needed
    ("xb" + "y" * 4, ["b"], 4, True),
    ("xbc" + "y" * 4, ["b", "bc"], 4, True),  # longest is 2: 2 + 4 = 6 characters from the cut (at 1)
    ("xbc" + "y" * 3, ["b", "bc"], 4, False),
])
def test_settled_table(text, stops, lookahead, expected):
    assert stop_settled(text, stops, lookahead) is expected


def _cut(text, stops):
    """cut_at_stop's cut: the first position where a (non-empty) stop string begins; None if none."""
    positions = [text.find(s) for s in stops if s and s in text]
    return min(positions) if positions else None


@pytest.mark.parametrize("stops", [["b"], ["b", "abc"], ["ca", "abcab", "bb"], ["\n", "```output"]])
@pytest.mark.parametrize("lookahead", [0, 3])
def test_once_settled_no_continuation_moves_the_cut(stops, lookahead):
    # Every prefix of random texts over the stops' own characters (so partial matches are common):
    # where a prefix is settled, every longer prefix has the same cut and is settled too.
    rng = random.Random(0)
    alphabet = sorted(set("".join(stops)) | {"x"})
    settled_prefixes = 0
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(24))
        for i in range(len(text) + 1):
            if stop_settled(text[:i], stops, lookahead):
                settled_prefixes += 1
                cut = _cut(text[:i], stops)
                assert all(_cut(text[:j], stops) == cut and stop_settled(text[:j], stops, lookahead)
                           for j in range(i, len(text) + 1)), (text, i)
    assert settled_prefixes > 100  # the property was exercised
