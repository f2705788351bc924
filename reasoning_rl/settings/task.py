"""``task``: which problems, which prompt, which reward; ``task.episode``: multi-turn episodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rewards.specs import AuditConfig, RewardSpec

OBSERVATION_ROLES = ("inline", "user", "tool")
"""How an environment's observation enters the episode: inline in the completion, or as a chat turn of
that role (reasoning_rl.envs.chat)."""


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
    cache: bool = True
    """Carry each episode's key/value cache from one turn to the next, so a turn prefills only the
    observation (rollout.backend=native on the lean runtime; other engines recompute, docs/tools.md).
    false: every turn prefills its whole context (same tokens up to float rounding, slower)."""
    observation_role: str = "inline"
    """Where an observation goes (:mod:`reasoning_rl.envs.chat`): ``inline``, its text inside the policy's
    turn (ToRA's output block, the tiny model's tasks); ``user`` or ``tool``, a chat turn rendered by the
    tokenizer's chat template (the assistant turn ends, a message of that role holds the observation, a new
    assistant turn opens; all observation tokens), for a chat model."""

    retry_groups: float = 0.0
    """Training only: the chance that a group of episodes (one prompt's ``algo.group_size``) whose first turns
    did not all end the episode becomes a retry group: all its episodes continue from one of those first turns
    (the first in the group; with ``code_feedback``, a failed attempt and its feedback) as shared context, never
    trained on, so the group's advantages compare retries of the same failure (docs/tools.md, "Training the
    retry"). 0 = every episode runs on its own. Held-out evaluation never shares turns."""

    def problems(self, prefix: str = "task.episode") -> list[str]:
        """One line per setting that cannot run (the numeric ranges are checked with the other settings')."""
        if self.observation_role not in OBSERVATION_ROLES:
            return [f"{prefix}.observation_role={self.observation_role!r} is unknown; choose one of "
                    f"{', '.join(OBSERVATION_ROLES)}"]
        return []


@dataclass
class TaskConfig:
    """What to train on: a dataset definition and the settings only training has."""

    name: str = "arithmetic"
    """Dataset definition (``reasoning_rl/tasks/definitions/<name>.yaml``) or the path of a definition YAML."""
    train_split: str | None = None
    """Split to train on; null = the definition's ``train_split``."""
    eval_split: str | None = None
    """Split for held-out evaluation; null = the definition's ``eval_split``. ``<definition>:<split>``
    takes another definition's split with the same verifier (``math500:test`` for ``task=math``)."""
    data_dir: str | None = None
    """Folder with local copies: each split's ``local_file`` in it is read instead of the hub."""
    data_files: dict[str, str] = field(default_factory=dict)
    """Local file (JSON, JSONL or Parquet) per split (``+task.data_files.train=/data/math_train.jsonl``);
    wins over ``data_dir``."""
    source_kwargs: dict[str, Any] = field(default_factory=dict)
    """Overrides of a generated dataset's keyword arguments for every split
    (``+task.source_kwargs.max_operand=9``, ``operations``)."""
    prompt_template: str | None = None
    """``str.format`` template over the row's fields; null = the definition's."""
    use_chat_template: bool = False
    """Wrap the rendered prompt as a user message with the tokenizer's chat template."""
    system_prompt: str | None = None
    """System message (chat template), or text put before the prompt (raw), as in evaluation."""
    rewards: list[RewardSpec] = field(default_factory=list)
    """Reward components (verifier name, weight, options). Empty = the definition's verifier alone. Accuracy is
    measured by the definition's verifier as the first component: listed first, its options go on top of the
    definition's; not listed, it is put first with weight 0 (measured, not rewarded)."""
    none_policy: str = "propagate"
    """How an unscorable component combines: ``propagate``, ``skip`` or ``zero`` (see rewards.compose)."""
    allow_train_on_eval: bool = False
    """Train on a split that evaluation measures (the definition's or the held-out one); refused unless true,
    and warned about when true: the held-out numbers are then not held out."""
    max_train_examples: int | None = None
    """Keep only the first N training rows (null: all)."""
    max_eval_examples: int | None = 200
    """Keep only the first N held-out rows (null: all)."""
    env: str | None = None
    """Environment of multi-turn episodes (``python_tool``, or any registered name; reasoning_rl.envs,
    docs/tools.md); null = single-turn completions, as before."""
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    """How an episode runs when ``env`` is set: ``max_turns``, the token budget ``max_tokens``, the
    environment's ``options``."""
    audit: AuditConfig = field(default_factory=AuditConfig)
    """Verifier audit: a second verifier re-scores a seeded sample of each step's completions
    (``task.audit.verifier=math +task.audit.options.strict=true``); logged as ``audit/*``, the
    disagreements in ``audit.jsonl`` (rewards.audit, docs/rewards.md). Off by default."""
