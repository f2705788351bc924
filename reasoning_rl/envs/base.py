"""What an environment is: the contract of a multi-turn episode.

An episode alternates the policy's turns and the environment's observations::

    prompt   <- env.reset(example)                       the first prompt text
    repeat up to max_turns:
        turn <- the policy samples until env.stop or EOS  (token ids kept as sampled)
        step <- env.step(turn text)                       observation, done, reward
        stop when step.done, or EOS, or the token budget is spent
        append step.observation, tokenized                (context: never trained on)

The runner (:mod:`reasoning_rl.envs.episode`) owns the tokens; an environment sees and returns
text only, so a new one is a small class: ``reset``, ``step`` and a ``stop`` marker.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

ToolStatus = Literal["none", "ok", "error", "timeout"]


@dataclass(frozen=True)
class StepResult:
    """What the environment answers to one policy turn."""

    observation: str = ""
    """Text appended to the context after the turn (tokenized, masked out of the loss); "" = none."""
    done: bool = False
    """True ends the episode after this turn (no observation is appended)."""
    reward: float | None = None
    """A per-turn reward, recorded on the episode; the training reward stays the task's verifier on the
    episode's scored text (:meth:`Environment.scored_text`; None = no per-turn reward)."""
    tool: ToolStatus = "none"
    """What the turn's tool call gave: ``none`` (no call), ``ok``, ``error`` (the program failed, or the
    call was malformed) or ``timeout`` (killed at the time limit); counted in the ``env/*`` metrics."""


@dataclass(frozen=True)
class Turn:
    """One part of an episode: a policy turn (``sampled``, trained on) or an ``observation`` (context)."""

    role: Literal["sampled", "observation"]
    text: str
    start: int
    """First token of the part in the completion's ``token_ids`` (after the prompt)."""
    end: int
    """One past its last token: ``token_ids[start:end]``; ``loss_mask`` is 1 there for ``sampled``."""
    tool: ToolStatus = "none"
    """A sampled turn handed to the environment: what its step gave (``StepResult.tool``)."""
    reward: float | None = None
    """A sampled turn handed to the environment: its ``StepResult.reward``."""
    trained: bool = True
    """False for a sampled turn the loss does not see: the first turn a retry group shares
    (``task.episode.retry_groups``), context for the turns after it (``loss_mask`` 0 there)."""


class Environment:
    """One episode's environment: :meth:`reset` once, then :meth:`step` after each policy turn.

    A fresh instance is built for every episode (state lives on ``self``), from the registry by name
    with the options of ``task.episode.options`` (:func:`reasoning_rl.envs.registry.get_environment`)."""

    stop: tuple[str, ...] = ()
    """Stop strings that end a policy turn and hand it to :meth:`step` (EOS ends the episode, but see
    :attr:`answers_turn_end`)."""
    answers_turn_end: bool = False
    """With chat observations (``task.episode.observation_role`` user or tool), whether a turn the policy
    ends with its end-of-turn token (the tokenizer's EOS, e.g. ``<|im_end|>``) is handed to :meth:`step`
    like one ended by a stop marker (True: ``code_feedback``, where ending the turn submits the attempt)
    instead of ending the episode (False: the default, e.g. ``python_tool``'s final answer)."""

    def reset(self, example: Any) -> str:
        """The first prompt of the episode for ``example`` (a :class:`reasoning_rl.tasks.Example`);
        by default the task's own prompt."""
        return example.prompt

    def step(self, model_text: str) -> StepResult:
        """React to one policy turn (its text, cut before the stop string)."""
        raise NotImplementedError

    def fork(self) -> Environment:
        """An independent copy of this environment in the middle of its episode: a retry group
        (``task.episode.retry_groups``) continues one episode in several. ``copy.deepcopy`` by default;
        an environment holding something that must be shared rather than copied (a sandbox handle)
        overrides it."""
        return copy.deepcopy(self)

    def scored_text(self, turns: Sequence[Turn]) -> str:
        """The text the task's verifier scores (``Completion.text``): by default the whole episode, every
        turn and observation in order; ``code_feedback``: the final attempt alone."""
        return "".join(t.text for t in turns)

    def reward_scale(self, turns: int) -> float:
        """Factor on the episode's reward after ``turns`` policy turns (1 = the verifier's reward as it is;
        ``code_feedback``'s ``attempt_discount`` makes later attempts worth less)."""
        return 1.0

    def observation_spans(self, text: str) -> list[tuple[int, int]]:
        """The ``[start, end)`` character spans of ``text`` (a whole episode written out, e.g. a warm-start
        reference after :meth:`reset`) that this environment would have written: its observations, left
        out of the warm start's loss with ``warmstart.mask_observations``. By default none."""
        return []


