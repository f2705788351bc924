"""The rollout stack: what a rollout is, composed once from the config (docs/rollouts.md).

Every layer is a :class:`~reasoning_rl.rollouts.layer.RolloutLayer` (generate, ``update_policy``,
``pop_metrics``, close) and wraps the one below it. Bottom to top, in this fixed order:

    base       rollout.backend: hf | native | vllm over the trainer's model (policy.engines.make_engine)
    inject     rollout.inject: sample from a perturbed behaviour copy (rollouts.inject)         training only
    async      rollout.max_staleness=k: a generator process runs k versions ahead               training only
               (rollouts.async_engine)
    episodes   task.env: every rollout a multi-turn episode (envs.episode)                      both tops
    sharding   trainer.fsdp=true on several ranks: sample with the full parameters gathered    both tops
               (distributed.FullParameterEngine)

The stack has two tops, each a named part:

    policy_engine   base (+ episodes, sharding): samples the policy as it is; held-out evaluation,
                    retention, the KL-to-base probe
    rollout         base (+ inject or async) (+ episodes) (+ sharding): the training rollouts the
                    algorithm samples (``RunContext.engine``)

They are one object when no training-only layer applies (and episodes need no retry groups). The run
loop holds the stack and calls only its methods (:meth:`RolloutStack.sync`, :meth:`~RolloutStack.pop_metrics`,
:meth:`~RolloutStack.prefetch`, ...); which layers it has is the stack's business. inject and async
never run together, nor either with sharding, nor async with episodes (reasoning_rl.async_checks,
reasoning_rl.config).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reasoning_rl import distributed
from reasoning_rl.async_checks import reference_refusal
from reasoning_rl.envs.episode import with_environment
from reasoning_rl.policy.engines import HFEngine, make_engine
from reasoning_rl.rollouts.async_engine import AsyncEngine, PrescoredReward, RewardSettings
from reasoning_rl.rollouts.inject import InjectedEngine, inject_engine
from reasoning_rl.rollouts.layer import RolloutLayer

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RolloutStack:
    """The rollout layers of one run, built by :func:`build_stack` (module docstring)."""

    base: RolloutLayer
    """The engine of ``rollout.backend`` alone (the policy runtime check samples with it)."""
    policy_engine: RolloutLayer
    """The un-perturbed policy: held-out evaluation, retention, the KL-to-base probe."""
    rollout: RolloutLayer
    """The training rollouts (``RunContext.engine``)."""
    layers: tuple[str, ...] = ("base",)
    """The layers built, bottom to top (for the log)."""
    injection: InjectedEngine | None = None
    asynchrony: AsyncEngine | None = None
    wrappers: tuple[RolloutLayer, ...] = ()
    """Every layer built above the base, bottom to top: what :meth:`close` releases."""
    steps: int = 0
    """``trainer.steps``: the asynchrony layer requests no step beyond the run's last."""
    prompts_per_step: int = 0
    sharded: bool = False
    """The sharding layer is built: the models are sharded (:meth:`shard`) and sampling gathers them."""

    @classmethod
    def single(cls, engine: RolloutLayer, sharded: bool = False) -> RolloutStack:
        """A stack of one layer: ``engine`` samples everything (tools and tests with an engine of their own);
        ``sharded``: the run's models are still sharded by :meth:`shard` (the engine gathers them itself)."""
        return cls(base=engine, policy_engine=engine, rollout=engine, sharded=sharded)

    @property
    def tops(self) -> list[RolloutLayer]:
        """The distinct tops, the policy engine first: what a sync or a metrics read reaches."""
        return [self.policy_engine] if self.rollout is self.policy_engine else [self.policy_engine, self.rollout]

    def describe(self) -> str:
        return " > ".join(self.layers)

    # -- what every step does
    def sync(self, model: Any, version: int) -> None:
        """Hand every top the policy's weights after ``version`` updates (each passes them down)."""
        for top in self.tops:
            top.update_policy(model, version)

    def pop_metrics(self) -> dict[str, float]:
        """What the layers measured since the last call (vLLM: sync time, log-prob mismatch; episodes:
        ``env/*``; the generator's timings), the policy engine's first."""
        out: dict[str, float] = {}
        for top in self.tops:
            out.update(top.pop_metrics())
        return out

    def sampling_version(self, step: int) -> int:
        """The policy version that samples step ``step``'s training rollouts."""
        if self.asynchrony is not None:
            return max(0, step - self.asynchrony.k)
        if self.injection is not None:  # the behaviour copy's (rollout.inject.stale: k behind)
            return self.injection.policy_version
        return step

    def prefetch(self, step: int, algorithm: Any, sampler: Any, examples: Sequence[Any]) -> None:
        """rollout.max_staleness: request the rollouts of step ``step`` and the next k (those not yet
        requested), each what the algorithm says it will sample (``Algorithm.next_request``) from the prompt
        sampler's examples of that step, with the weights of version max(0, s - k). Nothing without asynchrony."""
        engine = self.asynchrony
        if engine is None:
            return
        last = min(self.steps, step + engine.k + 1)
        if engine.next_step < step:
            engine.skip_to(step)  # a resumed run: earlier steps are done
        if last <= engine.next_step:
            return
        ahead = sampler.upcoming(self.prompts_per_step, last - step)
        requests = []
        for s in range(engine.next_step, last):
            request = algorithm.next_request(s, [examples[i] for i in ahead[s - step]])
            if request is None:
                raise ValueError(f"rollout.max_staleness: {type(algorithm).__name__} says nothing of what it samples "
                                 "next (Algorithm.next_request), so no generator can run ahead of it; set "
                                 "rollout.max_staleness=0")
            requests.append(dataclasses.replace(request, version=max(0, s - engine.k)))
        engine.prefetch(requests)

    # -- the layers with state of their own
    @property
    def stale_versions(self) -> int:
        """How many versions behind the training rollouts may be: k of the asynchrony layer or of
        ``rollout.inject.stale`` (0: no weight history to keep)."""
        if self.asynchrony is not None:
            return self.asynchrony.k
        return self.injection.cfg.stale if self.injection is not None else 0

    def weight_history(self) -> list[tuple[int, dict[str, Any]]] | None:
        """The older weight versions the next steps sample with, for a checkpoint (exact resume); None
        when no layer samples with older versions."""
        if not self.stale_versions:
            return None
        return (self.asynchrony or self.injection).weight_history()  # type: ignore[union-attr]

    def restore_history(self, history: list[tuple[int, dict[str, Any]]] | None) -> None:
        """A resumed run's older versions (from :meth:`weight_history`) back into the layer that samples with
        them: the steps after the resume sample exactly as without the break."""
        k = self.stale_versions
        if not k:
            return
        if history is None:
            log.warning("the checkpoint holds no weight history (written before it was saved), so the first %d "
                        "steps after this resume sample from the resumed weights, fewer updates back than a run "
                        "without the break", k)
            return
        (self.asynchrony or self.injection).load_history(history)  # type: ignore[union-attr]

    def reward(self, reward: Any) -> Any:
        """The reward the algorithm scores its rollouts with: ``reward``, or, when the generator process
        scores them, a :class:`~reasoning_rl.rollouts.async_engine.PrescoredReward` over it."""
        if self.asynchrony is not None and self.asynchrony.scores_rewards:
            return PrescoredReward(reward, self.asynchrony)
        return reward

    def attach_reference(self, algorithm: Any, cfg: Any) -> None:
        """rollout.max_staleness: the generator computes the reference log-probs of its completions when the
        algorithm offers its reference (``Algorithm.generator_reference``: the grpo module, by the rule of
        reasoning_rl.async_checks.reference_refusal); otherwise the algorithm's update computes them."""
        if self.asynchrony is None:
            return
        job = algorithm.generator_reference()
        if job is not None:
            self.asynchrony.set_reference(job)
            log.info("asynchronous rollouts: the generator process samples, scores the rewards and computes the "
                     "reference log-probs; the trainer updates")
            return
        why = reference_refusal(cfg) or (f"algo.name={cfg.algo.name!r} computes them in its update"
                                         if cfg.algo.uses_reference() else "no reference model")
        log.info("asynchronous rollouts: the generator process samples and scores the rewards; the update computes "
                 "the reference log-probs (%s)", why)

    def shard(self, models: list[Any], optimizers: list[Any]) -> None:
        """The sharding layer's other half: shard ``models`` (the policy, then the models the algorithm holds:
        the reference) layer by layer with FSDP2, once set up whole, and point ``optimizers`` at the shards
        (reasoning_rl.distributed.shard_run). Nothing when the stack has no sharding layer."""
        if not self.sharded:
            return
        distributed.shard_run(models, optimizers)
        log.info("trainer.fsdp: %d models sharded over %d ranks", len(models), distributed.world_size())

    def live_engine(self, model: Any, tokenizer: Any, batch_size: int) -> RolloutLayer:
        """An engine that samples ``model`` as it trains (the warm start's probe): the policy engine when its
        base samples the trainer's own model object (hf, native), else a transformers one (an engine with
        its own copy of the weights, vLLM, would sample stale ones)."""
        if isinstance(self.base, HFEngine):
            return self.policy_engine
        return HFEngine(model, tokenizer, batch_size=batch_size)

    def close(self) -> None:
        """Close every layer above the base, top first (the asynchrony layer stops its process). The base
        engine holds nothing of its own to release here (hf, native: the trainer's model; vLLM: the process's)."""
        for layer in reversed(self.wrappers):
            layer.close()


def build_stack(cfg: Any, model: Any, tokenizer: Any, reward: Any, run_dir: Path,
                examples: Sequence[Any]) -> RolloutStack:
    """The run's rollout stack from the config ``cfg`` (a TrainConfig), in the order of the module docstring.
    ``reward`` is what the generator process scores with (async); ``examples``, the task's training and
    held-out examples, are what the environments reset from (episodes)."""
    ro = cfg.rollout
    base = make_engine(ro.backend, model, tokenizer, batch_size=ro.batch_size, rollout=ro,
                       workdir=run_dir / ".vllm", seed=cfg.trainer.seed)
    layers, wrappers = [f"base ({ro.backend})"], []
    policy: RolloutLayer = base
    training: RolloutLayer = base
    injection = asynchrony = None
    if ro.inject.active():  # training rollouts from a perturbed copy (reasoning_rl.rollouts.inject)
        injection = training = inject_engine(base, ro, model, cfg.trainer.seed)
        layers.append("inject")
    if ro.max_staleness:  # from a generator process running ahead, which scores them too
        rewards = None if reward is None else RewardSettings(reward, ro.reward_workers, ro.reward_timeout)
        asynchrony = training = AsyncEngine(model, tokenizer, ro.backend, ro.max_staleness,
                                            batch_size=ro.batch_size, rewards=rewards)
        layers.append(f"async (k={ro.max_staleness})")
    wrappers += [w for w in (injection, asynchrony) if w is not None]
    if cfg.task.env is not None:  # every rollout, training and held-out, a multi-turn episode (docs/tools.md)
        policy, training = with_environment(cfg.task, tokenizer, policy, training, examples)
        wrappers += [policy] if training is policy else [policy, training]
        layers.append(f"episodes ({cfg.task.env})")
    if distributed.fsdp_active(cfg):  # sampling gathers the sharded parameters first
        wrapped = distributed.FullParameterEngine(policy, model)
        training = wrapped if training is policy else distributed.FullParameterEngine(training, model)
        policy = wrapped
        wrappers += [policy] if training is policy else [policy, training]
        layers.append("sharding")
    elif cfg.trainer.fsdp:
        log.info("trainer.fsdp=true in a single process: there is nothing to shard, the model stays whole")
    return RolloutStack(base=base, policy_engine=policy, rollout=training, layers=tuple(layers),
                        injection=injection, asynchrony=asynchrony, wrappers=tuple(wrappers),
                        steps=cfg.trainer.steps, prompts_per_step=cfg.algo.prompts_per_step,
                        sharded="sharding" in layers)
