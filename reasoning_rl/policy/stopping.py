"""Stop strings inside the native decode loop: :class:`StopWatch` finds the rows whose stop string is
settled, so the loop finishes them like EOS rows instead of decoding filler until the slowest row ends.

The completion does not change: the engine still cuts each row afterwards with
:func:`reasoning_rl.rollouts.sampling.cut_at_stop`, and a row is finished only once that cut can no longer move
(:func:`reasoning_rl.rollouts.sampling.stop_settled`), so every token it would have sampled after this point lies
past the cut. Finishing a row late (or never) gives the same completion too: it only costs decode steps.
That splits the work in two:

- a cheap filter each step: decode a tail window of each running row's new tokens (with a fast
  tokenizer's own backend, no Python per token) and look for a stop string in it;
- the exact check, only for the rows the filter flags: decode the row's new tokens whole and ask
  :func:`~reasoning_rl.rollouts.sampling.stop_settled`. A row is flagged from the step a stop string completes
  until it is settled, usually that one step.

The window. When a row's stop string first becomes settled, where it begins is bounded in characters:
either it was just completed, so it begins within ``longest - 1`` characters before the new token's
text, or an earlier step found it unsettled, which :func:`~reasoning_rl.rollouts.sampling.stop_settled` allows
only while a stop string may still begin before it (within ``longest - 1`` characters of the end) or,
with the space clean-up lookahead, while fewer than ``longest + lookahead`` characters follow it. So
``longest + lookahead`` characters before the new token cover it, plus up to 3 characters that decode
differently at the window's edge (the first bytes of a character cut off, U+FFFD each; a leading space
a SentencePiece decoder strips): the window is ``longest + lookahead + 4`` tokens, enough while tokens
decode to at least one character each, and widened (doubled) for a row while its window decodes to
fewer characters than it has tokens (special tokens and partial characters decode to nothing).
A row ending in ever more incomplete characters could outrun the window: it then runs on, as without
the watch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from reasoning_rl.rollouts.sampling import stop_settled

CLEANUP_LOOKAHEAD = 8
"""Characters at the end of a decoded text that a tokenizer with ``clean_up_tokenization_spaces`` may
still change (its patterns, ``" ."``, ``" n't"``, ..., are at most 4 characters; twice that for margin)."""

WINDOW_SLACK = 4
"""Tokens added to the window: the new token, and up to 3 characters that decode differently at its edge."""


class StopWatch:
    """Which running rows of a decode loop have a settled stop string (module docstring)."""

    def __init__(self, tokenizer: Any, stops: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stops = [s for s in stops if s]
        if not self.stops:
            raise ValueError("StopWatch needs at least one non-empty stop string")
        self.lookahead = CLEANUP_LOOKAHEAD if getattr(tokenizer, "clean_up_tokenization_spaces", False) else 0
        self.window = max(map(len, self.stops)) + self.lookahead + WINDOW_SLACK  # tokens
        self.full_checks = 0
        """Rows decoded whole for the exact check (the filter flagged them)."""

    @classmethod
    def for_sampling(cls, tokenizer: Any, stops: Sequence[str]) -> StopWatch | None:
        """A watch for ``stops``; None when there is none to watch (no stop string, or only empty ones)."""
        return cls(tokenizer, stops) if any(stops) else None

    def settled(self, tokens: torch.Tensor, running: torch.Tensor) -> torch.Tensor:
        """Rows ``[B]`` (bool) among ``running`` ``[B]`` whose new tokens ``tokens`` ``[B, t]`` (no EOS
        yet: running rows) hold a settled stop string."""
        done = torch.zeros_like(running)
        rows = running.nonzero().squeeze(1).tolist()
        if not rows:
            return done
        for row, tail in zip(rows, self._windows(tokens, rows)):
            if any(s in tail for s in self.stops):
                self.full_checks += 1
                text = self.tokenizer.decode(tokens[row].tolist(), skip_special_tokens=True)  # as the engine will
                done[row] = stop_settled(text, self.stops, self.lookahead)
        return done

    def _windows(self, tokens: torch.Tensor, rows: list[int]) -> list[str]:
        """Each row's last ``window`` tokens decoded, widened while they decode to fewer characters than
        they have tokens. Only a filter, so it may decode with the tokenizer's fast backend (no space
        clean-up): what it misses only runs on."""
        t = tokens.shape[1]
        width = min(self.window, t)
        windows = tokens[rows, t - width:].tolist()  # [rows, width]: one transfer
        texts = [self._decode(w) for w in windows]
        for i, row in enumerate(rows):
            wide = width
            while len(texts[i]) < wide < t:
                wide = min(2 * wide, t)
                texts[i] = self._decode(tokens[row, t - wide:].tolist())
        return texts

    def _decode(self, ids: list[int]) -> str:
        backend = getattr(self.tokenizer, "backend_tokenizer", None)  # a fast tokenizer's own: no Python per token
        if backend is not None:
            return backend.decode(ids, skip_special_tokens=True)
        return self.tokenizer.decode(ids, skip_special_tokens=True)
