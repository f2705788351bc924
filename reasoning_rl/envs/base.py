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

from dataclasses import dataclass, field
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
    whole episode text (None = no per-turn reward)."""
    tool: ToolStatus = "none"
    """What the turn's tool call gave: ``none`` (no call), ``ok``, ``error`` (the program failed, or the
    call was malformed) or ``timeout`` (killed at the time limit); counted in the ``env/*`` metrics."""


class Environment:
    """One episode's environment: :meth:`reset` once, then :meth:`step` after each policy turn.

    A fresh instance is built for every episode (state lives on ``self``), from the registry by name
    with the options of ``task.episode.options`` (:func:`reasoning_rl.envs.registry.get_environment`)."""

    stop: tuple[str, ...] = ()
    """Stop strings that end a policy turn and hand it to :meth:`step` (EOS always ends the episode)."""

    def reset(self, example: Any) -> str:
        """The first prompt of the episode for ``example`` (a :class:`reasoning_rl.tasks.Example`);
        by default the task's own prompt."""
        return example.prompt

    def step(self, model_text: str) -> StepResult:
        """React to one policy turn (its text, cut before the stop string)."""
        raise NotImplementedError


@dataclass
class EpisodeConfig:
    """How a multi-turn episode runs (``task.env`` names the environment; these are ``task.episode``)."""

    max_turns: int = 4
    """Most policy turns in one episode; the episode ends after the last one, whatever the environment says."""
    max_tokens: int = 512
    """Token budget of the whole episode after the prompt: sampled tokens plus observation tokens. A turn
    samples at most ``min(rollout.max_new_tokens, what is left)``; an episode that reaches it ends with
    ``finish_reason="length"`` (an observation that does not fit is cut to what is left)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment's constructor (``+task.episode.options.timeout=2``)."""
