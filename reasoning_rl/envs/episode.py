"""Multi-turn episodes over any rollout engine: sample a turn, let the environment answer, continue.

:class:`EpisodeEngine` wraps an engine that can continue from token ids (``generate_from_ids``:
the hf and native engines) and is itself a :class:`reasoning_rl.rollouts.sampling.RolloutEngine`, so the
algorithms and held-out evaluation use it unchanged. For each episode, with ``B`` the token
budget (``task.episode.max_tokens``)::

    ids, mask  <- [], []                                   after the prompt's ids
    for turn in 1 .. max_turns:
        turn_ids, logprobs <- sample from prompt + ids, until env.stop or EOS, at most
                              min(rollout.max_new_tokens, B - len(ids)) tokens
        ids += turn_ids; mask += [1] * len(turn_ids)       kept as sampled, never re-tokenized
        end on EOS, on a turn cut at its length, or when the budget is spent
        obs <- env.step(turn text)                         end when obs.done
        obs_ids <- tokenize(obs.observation)               the only text ever tokenized
        ids += obs_ids[:B - len(ids)]; mask += [0] * ...   context: the loss never sees them

The completion holds the whole episode (``token_ids``, ``loss_mask``, ``logprobs`` with NaN on
observation tokens) and its text is the turns' decoded text with the observations between them;
the task's reward scores that text. An episode that reaches the budget, or whose last turn is cut
at ``rollout.max_new_tokens``, or that still wants a tool call after ``max_turns``, ends with
``finish_reason="length"``.

The key/value cache is carried from turn to turn where the engine can (``task.episode.cache``, on
by default): the native engine on the lean runtime (``NativeEngine.context_cache``) keeps each
running episode's keys and values after a turn, so the next turn prefills only the last sampled
token and the observation instead of the whole context (reasoning_rl.policy.lean.context_cache has
the layout); the tokens and log-probs are those of the recompute path up to float rounding. Other
engines (hf, vLLM, the native engine on the model's own modules) recompute each turn's context.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from reasoning_rl.envs.base import Environment, StepResult, Turn
from reasoning_rl.envs.chat import hands_turn_end, observation_tokens
from reasoning_rl.envs.registry import check_options, environment_class, get_environment
from reasoning_rl.errors import UserError
from reasoning_rl.rollouts.sampling import Completion, SamplingConfig
from reasoning_rl.settings.task import EpisodeConfig

log = logging.getLogger(__name__)

TURN_SEED_STRIDE = 7_919
"""A prime: turn t of a call seeded s samples with seed ``s + t * TURN_SEED_STRIDE``."""
STEP_THREADS = 8
"""Environments stepped at once after a turn (their tool calls overlap in the sandbox pool)."""


class EngineCannotContinueError(UserError):
    """The rollout engine cannot continue from token ids, which multi-turn episodes need."""


@dataclass
class EpisodeStats:
    """Counts over the episodes run since the last :meth:`pop`; the ``env/*`` metrics (docs/metrics.md)."""

    episodes: int = 0
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    tool_timeouts: int = 0
    observation_tokens: int = 0
    prefill_tokens: int = 0
    budget_cut: int = 0
    turn_limit_cut: int = 0
    groups: int = 0
    """Groups an engine with retry groups ran (``task.episode.retry_groups`` > 0); 0 otherwise."""
    retry_groups: int = 0
    turn_rewards: list[float] = field(default_factory=list)

    def pop(self) -> dict[str, float]:
        """The metrics, then zero every count; {} when no episode ran."""
        if not self.episodes:
            return {}
        e = self.episodes
        out = {
            "env/turns_mean": self.turns / e,
            "env/tool_calls_mean": self.tool_calls / e,
            "env/tool_error_rate": self.tool_errors / self.tool_calls if self.tool_calls else 0.0,
            "env/tool_timeouts": float(self.tool_timeouts),
            "env/observation_tokens_mean": self.observation_tokens / e,
            "env/prefill_tokens_mean": self.prefill_tokens / e,
            "env/budget_cut_fraction": self.budget_cut / e,
            "env/turn_limit_fraction": self.turn_limit_cut / e,
        }
        if self.turn_rewards:
            out["env/turn_reward_mean"] = sum(self.turn_rewards) / len(self.turn_rewards)
        if self.groups:
            out["env/retry_group_fraction"] = self.retry_groups / self.groups
        self.__init__()  # type: ignore[misc]
        return out


@dataclass
class EpisodeCompletion(Completion):
    """A whole episode as one completion, with its parts and the environment's reward factor."""

    turns: list[Turn] = field(default_factory=list)
    """The episode's parts in order: their spans tile ``token_ids``; ``text`` is what the environment
    says the verifier scores (:meth:`Environment.scored_text`: all of them joined, by default)."""
    reward_scale: float = 1.0
    """The environment's factor on the task's reward (:meth:`Environment.reward_scale`; the training
    reward is the verifier's times this, held-out accuracy reads the verifier alone)."""


@dataclass
class _Episode:
    env: Environment
    prompt_ids: list[int]
    index: int = 0  # its place in the call: the key of its carried key/value cache
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # None while running

    def end(self, reason: str) -> None:
        self.finish_reason = reason

    def add(self, ids: Sequence[int], sampled: bool, logprobs: Sequence[float] | None, text: str) -> None:
        self.turns.append(Turn("sampled" if sampled else "observation", text, len(self.ids), len(self.ids) + len(ids)))
        self.ids += ids
        self.mask += [1 if sampled else 0] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [math.nan] * len(ids)

    @property
    def last_text(self) -> str:
        return self.turns[-1].text


class EpisodeEngine:
    """A rollout engine whose completions are whole episodes with the environment ``env_name``."""

    def __init__(self, engine: Any, tokenizer: Any, env_name: str, episode: EpisodeConfig,
                 examples: Sequence[Any] = (), stats: EpisodeStats | None = None) -> None:
        """``examples``: the task's examples, so the environment's ``reset`` gets the example behind
        a prompt (a prompt not among them gets an example with that prompt and no reference)."""
        if not callable(getattr(engine, "generate_from_ids", None)):
            raise EngineCannotContinueError(
                f"task.env={env_name}: the rollout engine {type(engine).__name__} cannot continue from token ids, "
                "which multi-turn episodes need; use rollout.backend=hf or rollout.backend=native")
        if episode.max_turns < 1 or episode.max_tokens < 1:
            raise ValueError(f"task.episode needs max_turns >= 1 and max_tokens >= 1, got {episode}")
        environment_class(env_name)  # an unknown name fails here, before any sampling
        check_options(env_name, dict(episode.options))
        self.inner, self.tokenizer, self.env_name, self.episode = engine, tokenizer, env_name, episode
        self.examples = {e.prompt: e for e in examples}
        self.stats = stats if stats is not None else EpisodeStats()
        self._said_recompute = False

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    def update_policy(self, model: Any, version: int) -> None:
        self.inner.update_policy(model, version)

    def close(self) -> None:
        """Nothing of its own to release (each episode's environment ends with it; the stack closes the
        layer below)."""

    def pop_metrics(self) -> dict[str, float]:
        """The wrapped engine's measurements and the episodes' ``env/*`` counts."""
        pop = getattr(self.inner, "pop_metrics", None)
        return {**(pop() if pop is not None else {}), **self.stats.pop()}

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingConfig,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` episodes for each prompt, grouped per prompt, in prompt order."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        episodes = [self._start(p, i * n + j) for i, p in enumerate(prompts) for j in range(n)]
        cache = self._context_cache()  # this call's episodes' keys and values (None: recompute)
        for turn in range(self.episode.max_turns):
            running = [e for e in episodes if e.finish_reason is None]
            if not running:
                break
            self._turn(running, sampling, None if seed is None else seed + turn * TURN_SEED_STRIDE,
                       last=turn + 1 == self.episode.max_turns, cache=cache)
            if turn == 0 and n > 1 and self.episode.retry_groups > 0:
                self._share_first_turns(episodes, n, random.Random(seed), cache)
        flat = [self._completion(e) for e in episodes]
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    def _share_first_turns(self, episodes: list[_Episode], n: int, rng: random.Random, cache: Any) -> None:
        """Retry groups (``task.episode.retry_groups`` = p): after the first turn, each group of ``n``
        episodes of which at least one goes on (its first turn did not end it: a failed attempt and
        its feedback) becomes, with chance p, a retry group::

            source   <- the group's first episode that goes on
            e        <- source's state, for every episode e of the group: its ids, its environment
                        (Environment.fork), its log-probs, its observation
            loss_mask = 0 on the shared first turn (context, Turn.trained = False)

        so the group's ``n`` later turns are sampled from one context and their advantages compare
        retries of the same failure. Without it, once the policy's first attempts mostly pass, a group
        holds few retries, and those follow different failures. The first turns the group drops were
        sampled and stepped (counted in ``env/*``); the group's first-turn gradient is given up for
        the retry's, which is why p < 1 (docs/tools.md, "Training the retry")."""
        for g in range(0, len(episodes), n):
            group = episodes[g:g + n]
            going_on = [e for e in group if e.finish_reason is None]
            self.stats.groups += 1
            if not going_on or rng.random() >= self.episode.retry_groups:
                continue
            self.stats.retry_groups += 1
            source = going_on[0]
            first = source.turns[0]
            mask = [0 if first.start <= k < first.end else m for k, m in enumerate(source.mask)]
            turns = [dataclasses.replace(first, trained=False), *source.turns[1:]]
            for e in group:
                if e is not source:
                    e.env = source.env.fork()
                    if cache is not None:
                        cache.share(source.index, e.index)
                e.ids, e.mask, e.logprobs = list(source.ids), list(mask), list(source.logprobs)
                e.turns, e.versions, e.finish_reason = list(turns), list(source.versions), None

    def _context_cache(self) -> Any:
        """A fresh key/value cache from the engine when ``task.episode.cache`` is on and the engine
        can carry one; None (each turn recomputes its context) otherwise, said once in the log."""
        if not self.episode.cache:
            return None
        open_cache = getattr(self.inner, "context_cache", None)
        cache = open_cache() if open_cache is not None else None
        if cache is None and not self._said_recompute:
            self._said_recompute = True
            refusal = getattr(self.inner, "context_cache_refusal", None)
            why = refusal() if refusal is not None else "it keeps no key/value cache between calls"
            log.info("task.episode.cache: the %s engine recomputes each turn's context (%s)",
                     type(self.inner).__name__, why)
        return cache

    def _start(self, prompt: str, index: int) -> _Episode:
        from reasoning_rl.tasks import Example

        example = self.examples.get(prompt) or Example(id="", prompt=prompt, reference=None, fields={})
        env = get_environment(self.env_name, **dict(self.episode.options))
        first = env.reset(example)
        ids = self.tokenizer(first, add_special_tokens=False)["input_ids"]
        return _Episode(env, list(ids), index)

    def _turn(self, running: list[_Episode], sampling: SamplingConfig, seed: int | None, last: bool,
              cache: Any = None) -> None:
        """One policy turn of every running episode, then each environment's answer; with ``cache``
        each episode continues from its keys and values of the previous turn (by its index)."""
        budget = self.episode.max_tokens
        room = [budget - len(e.ids) for e in running]
        turn_sampling = dataclasses.replace(
            sampling, max_new_tokens=min(sampling.max_new_tokens, max(room)),
            stop=[*sampling.stop, *(s for s in running[0].env.stop if s not in sampling.stop)])
        contexts = [e.prompt_ids + e.ids for e in running]
        if cache is None:
            outs = self.inner.generate_from_ids(contexts, turn_sampling, seed=seed)
            self.stats.prefill_tokens += sum(map(len, contexts))
        else:
            before = cache.prefilled_tokens
            outs = self.inner.generate_from_ids(contexts, turn_sampling, seed=seed, cache=cache,
                                                keys=[e.index for e in running])
            self.stats.prefill_tokens += cache.prefilled_tokens - before
        eos = self.tokenizer.eos_token_id
        handed: list[tuple[_Episode, str]] = []
        for e, c, left in zip(running, outs, room):
            self.stats.turns += 1
            ids = list(c.token_ids[:left])  # a turn may not run past the episode's budget
            logprobs = None if c.logprobs is None else c.logprobs[:left]
            e.add(ids, True, logprobs, self.tokenizer.decode(ids, skip_special_tokens=True))
            if c.policy_version is not None:
                e.versions.append(c.policy_version)
            ended = bool(ids) and ids[-1] == eos  # a chat's end of turn: handed on when hands_turn_end
            if ended and not hands_turn_end(self.episode.observation_role, e.env):
                e.end("stop")
            elif len(e.ids) >= budget:
                self._cut_by_budget(e)
            elif not ended and (c.finish_reason == "length" or not any(s in e.last_text for s in e.env.stop)):
                e.end(c.finish_reason)  # cut at rollout.max_new_tokens, or a stop string of rollout.stop
            else:
                handed.append((e, c.text))
        # The environments answer concurrently (each episode has its own; a tool call waits on the
        # sandbox, whose pool runs several programs at once); their answers are applied in order.
        with ThreadPoolExecutor(max_workers=max(1, min(STEP_THREADS, len(handed)))) as threads:
            steps = list(threads.map(lambda item: item[0].env.step(item[1]), handed))
        for (e, _), step in zip(handed, steps):
            self._observe(e, step, last)

    def _observe(self, e: _Episode, step: StepResult, last: bool) -> None:
        """Record the environment's answer to the turn; append its observation."""
        e.turns[-1] = dataclasses.replace(e.turns[-1], tool=step.tool, reward=step.reward)
        if step.tool != "none":
            self.stats.tool_calls += 1
            self.stats.tool_errors += step.tool in ("error", "timeout")
            self.stats.tool_timeouts += step.tool == "timeout"
        if step.reward is not None:
            self.stats.turn_rewards.append(float(step.reward))
        if step.done:
            e.end("stop")
            return
        if last:  # it still wants a tool call, but has no turn left to read the answer
            self.stats.turn_limit_cut += 1
            e.end("length")
            return
        obs_text, obs_ids = observation_tokens(self.tokenizer, step.observation, self.episode.observation_role, e.ids)
        left = self.episode.max_tokens - len(e.ids)
        kept = obs_ids[:left]
        self.stats.observation_tokens += len(kept)
        e.add(kept, False, None, obs_text if len(kept) == len(obs_ids)
              else self.tokenizer.decode(kept, skip_special_tokens=True))
        if len(e.ids) >= self.episode.max_tokens:
            self._cut_by_budget(e)

    def _cut_by_budget(self, e: _Episode) -> None:
        self.stats.budget_cut += 1
        e.end("length")

    def _completion(self, e: _Episode) -> EpisodeCompletion:
        self.stats.episodes += 1
        sampled = sum(t.role == "sampled" for t in e.turns)
        return EpisodeCompletion(text=e.env.scored_text(e.turns), token_ids=e.ids,
                                 finish_reason=e.finish_reason or "length", prompt_token_ids=e.prompt_ids,
                                 policy_version=min(e.versions) if e.versions else None,
                                 logprobs=e.logprobs, loss_mask=e.mask, turns=list(e.turns),
                                 reward_scale=e.env.reward_scale(sampled))


def with_environment(task_cfg: Any, tokenizer: Any, evaluation: Any, training: Any,
                     examples: Sequence[Any]) -> tuple[Any, Any]:
    """The held-out ``evaluation`` engine and the ``training`` rollouts' engine, unchanged when
    ``task.env`` is null (single-turn); else each wrapped in an :class:`EpisodeEngine` (one
    :class:`EpisodeStats` shared, so the ``env/*`` metrics count every episode whichever wrapper ran
    it). Only the training wrapper has ``task.episode.retry_groups``; the same engine twice, without
    retry groups, gives the same wrapper."""
    name = getattr(task_cfg, "env", None)
    if name is None:
        return evaluation, training
    stats = EpisodeStats()
    train = EpisodeEngine(training, tokenizer, name, task_cfg.episode, examples, stats)
    if evaluation is training and not task_cfg.episode.retry_groups:
        return train, train
    whole = dataclasses.replace(task_cfg.episode, retry_groups=0.0)  # evaluation runs every episode whole
    return EpisodeEngine(evaluation, tokenizer, name, whole, examples, stats), train
