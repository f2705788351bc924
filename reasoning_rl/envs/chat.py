"""Observations as chat turns: the text that ends the assistant's turn, holds the environment's answer in a
user (or tool) message and opens the next assistant turn, rendered by the tokenizer's own chat template.

``task.episode.observation_role`` says where an observation goes:

- ``inline`` (the default): the observation text is appended as it is, inside the policy's turn
  (ToRA / Qwen-Math's format: ``python_tool``'s output block continues the assistant's text).
- ``user`` or ``tool``: a chat turn. For a conversation whose last assistant turn is ``A`` and an
  observation ``O``, the appended text is the delta between two renderings of the template::

      render([..., assistant: A])                                     ...<|im_start|>assistant\\nA
      render([..., assistant: A, user: O], add_generation_prompt)     ...<|im_start|>assistant\\nA<|im_end|>\\n
                                                                      <|im_start|>user\\nO<|im_end|>\\n
                                                                      <|im_start|>assistant\\n
      delta = what follows A in the second                            <|im_end|>\\n<|im_start|>user\\n ...

  (SmolLM2's ChatML shown; nothing here writes a template's markers by hand, so any template works
  that renders an assistant message's content verbatim). ``A`` is a sentinel string: the delta does not
  depend on what the policy wrote. When the policy already ended its turn with the end-of-turn token
  (the tokenizer's EOS, ``<|im_end|>``; sampled, so it is trained on), the delta's copy of it is left out.

Every token of the delta is an observation token (loss mask 0): the policy is trained on what it
sampled, never on the template's markers or the environment's text.

**End of turn.** For a chat model EOS is the end-of-turn token, so by default it ends the episode. An
environment whose ``answers_turn_end`` is true (``code_feedback``: ending the turn submits the attempt)
gets an EOS-ended turn with chat observations, as it gets a turn ended by its stop marker
(:func:`hands_turn_end`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reasoning_rl.errors import UserError
from reasoning_rl.settings.task import OBSERVATION_ROLES

SENTINEL = "REASONING_RL_ASSISTANT_TURN_7F3A"
"""The assistant content of the rendered conversation; its end marks where the delta starts."""


class ChatObservationError(UserError, ValueError):
    """Chat observations asked of a tokenizer whose chat template cannot render them."""


def hands_turn_end(observation_role: str, env: Any) -> bool:
    """Whether a turn the policy ended with EOS goes to ``env.step`` (the episode goes on) instead of
    ending the episode: with chat observations, for an environment whose ``answers_turn_end`` is true."""
    return observation_role != "inline" and bool(getattr(env, "answers_turn_end", False))


def chat_observation(tokenizer: Any, observation: str, role: str = "user", turn_ended: bool = False) -> str:
    """The text that closes the assistant turn, holds ``observation`` as a ``role`` message and opens the
    next assistant turn, as the tokenizer's chat template renders it; without the leading end-of-turn
    token when ``turn_ended`` (the policy sampled it)."""
    if role not in OBSERVATION_ROLES[1:]:
        raise ValueError(f"a chat observation's role is one of {OBSERVATION_ROLES[1:]}, got {role!r}")
    if not getattr(tokenizer, "chat_template", None):
        raise ChatObservationError(
            f"task.episode.observation_role={role} renders observations with the tokenizer's chat template, and "
            f"this tokenizer ({getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)}) has none; use "
            "observation_role=inline or a chat model")
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": SENTINEL},
                {"role": role, "content": observation}]
    from jinja2 import TemplateError

    try:
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except TemplateError as exc:  # a template may refuse a role (its raise_exception): say which and what to do
        raise ChatObservationError(
            f"the tokenizer's chat template cannot render a {role!r} message after an assistant turn "
            f"({type(exc).__name__}: {exc}); use task.episode.observation_role=user or inline") from exc
    if rendered.count(SENTINEL) != 1:
        raise ChatObservationError(
            "the tokenizer's chat template does not render an assistant message's content verbatim (it changes "
            "or drops it), so the observation's chat turn cannot be found; use task.episode.observation_role=inline")
    delta = rendered.split(SENTINEL, 1)[1]
    eos = getattr(tokenizer, "eos_token", None)
    if turn_ended and eos and delta.startswith(eos):
        delta = delta[len(eos):]
    return delta


def observation_tokens(tokenizer: Any, observation: str, role: str,
                       context_ids: Sequence[int]) -> tuple[str, list[int]]:
    """The text appended after a policy turn for ``observation`` and its token ids.

    ``inline``: the observation itself. ``user``/``tool``: :func:`chat_observation`, after a turn that
    ended with EOS when ``context_ids`` ends with it. An empty observation appends nothing in either case
    (the policy's turn goes on)."""
    if role not in OBSERVATION_ROLES:
        raise ValueError(f"task.episode.observation_role must be one of {OBSERVATION_ROLES}, got {role!r}")
    if not observation:
        return "", []
    if role != "inline":
        ended = bool(context_ids) and context_ids[-1] == tokenizer.eos_token_id
        observation = chat_observation(tokenizer, observation, role, turn_ended=ended)
    return observation, list(tokenizer(observation, add_special_tokens=False)["input_ids"])
