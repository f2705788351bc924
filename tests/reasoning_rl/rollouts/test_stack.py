"""The rollout stack (reasoning_rl.rollouts.stack): its layers in their order, its two tops, and a run
loop that holds it without asking which layers it has."""

import ast
from pathlib import Path

import pytest

from reasoning_rl import distributed
from reasoning_rl.algo.base import Algorithm
from reasoning_rl.algo.batch import step_seed
from reasoning_rl.algo.grpo import GRPO
from reasoning_rl.algo.ppo import PPO
from reasoning_rl.envs.episode import EpisodeEngine
from reasoning_rl.policy.engines import HFEngine, NativeEngine
from reasoning_rl.policy.loading import load_model
from reasoning_rl.rollouts.async_engine import AsyncEngine
from reasoning_rl.rollouts.inject import InjectedEngine
from reasoning_rl.rollouts.layer import RolloutLayer
from reasoning_rl.rollouts.sampling import Request, SamplingConfig
from reasoning_rl.rollouts.stack import RolloutStack, build_stack
from reasoning_rl.tasks import Task
from tests.reasoning_rl.conftest import tiny_config

TRAINER = Path(__file__).resolve().parents[3] / "reasoning_rl" / "trainer.py"


def _stack(cfg, tmp_path):
    model, tokenizer = load_model(cfg.model)
    task = Task(cfg.task)
    examples = task.examples(task.train_split, tokenizer)
    return build_stack(cfg, model, tokenizer, task.reward(), tmp_path, examples), model


def test_the_default_stack_is_the_base_engine_alone(tmp_path):
    cfg = tiny_config()
    stack, model = _stack(cfg, tmp_path)
    assert stack.layers == ("base (hf)",)
    assert stack.policy_engine is stack.rollout is stack.base
    assert isinstance(stack.base, HFEngine) and stack.base.model is model
    assert stack.sampling_version(3) == 3 and stack.weight_history() is None
    assert stack.live_engine(model, None, 8) is stack.policy_engine  # hf samples the live model


def test_injection_is_a_training_layer_over_the_base(tmp_path):
    cfg = tiny_config()
    cfg.rollout.backend = "native"
    cfg.rollout.inject.stale = 2
    stack, model = _stack(cfg, tmp_path)
    assert stack.layers == ("base (native)", "inject")
    assert isinstance(stack.base, NativeEngine) and stack.policy_engine is stack.base  # evaluation: the policy
    assert isinstance(stack.rollout, InjectedEngine) and stack.rollout.behaviour is not model
    for version in range(4):  # versions 0..3 handed in; the copy samples with v - 2 (0 at the start)
        stack.sync(model, version)
        assert stack.base.policy_version == version
        assert stack.sampling_version(version) == max(0, version - 2)
    assert [v for v, _ in stack.weight_history()] == [1, 2]  # the two before the current one
    assert stack.stale_versions == 2


def test_episodes_wrap_both_tops_and_retry_groups_only_the_training_one(tmp_path):
    cfg = tiny_config()
    cfg.task.env = "code_feedback"
    stack, _ = _stack(cfg, tmp_path)
    assert stack.layers == ("base (hf)", "episodes (code_feedback)")
    assert isinstance(stack.policy_engine, EpisodeEngine) and stack.rollout is stack.policy_engine
    cfg.task.episode.retry_groups = 0.5
    stack, _ = _stack(cfg, tmp_path)
    assert stack.rollout is not stack.policy_engine
    assert stack.rollout.episode.retry_groups == 0.5 and stack.policy_engine.episode.retry_groups == 0.0
    assert stack.rollout.inner is stack.policy_engine.inner is stack.base


def test_a_single_process_has_no_sharding_layer(tmp_path):
    cfg = tiny_config()
    cfg.trainer.fsdp = True
    assert not distributed.is_distributed()
    stack, _ = _stack(cfg, tmp_path)
    assert stack.layers == ("base (hf)",)


class _Layer:
    """A layer that records what the stack asks of it (unit test of the stack's fan-out)."""

    def __init__(self, name, calls):
        self.name, self.calls, self.policy_version = name, calls, 0

    def generate(self, prompts, n, sampling, seed=None):
        return [[] for _ in prompts]

    def update_policy(self, model, version):
        self.calls.append((self.name, "sync", version))
        self.policy_version = version

    def pop_metrics(self):
        self.calls.append((self.name, "metrics"))
        return {f"{self.name}/x": 1.0}

    def close(self):
        self.calls.append((self.name, "close"))


def test_sync_metrics_and_close_reach_each_top_once_policy_first():
    calls = []
    base, policy, training = (_Layer(n, calls) for n in ("base", "policy", "training"))
    stack = RolloutStack(base=base, policy_engine=policy, rollout=training, wrappers=(policy, training))
    stack.sync(None, 5)
    assert stack.pop_metrics() == {"policy/x": 1.0, "training/x": 1.0}
    stack.close()
    assert calls == [("policy", "sync", 5), ("training", "sync", 5), ("policy", "metrics"),
                     ("training", "metrics"), ("training", "close"), ("policy", "close")]
    calls.clear()
    one = RolloutStack.single(base)
    one.sync(None, 1)
    one.pop_metrics()
    one.close()  # the base engine is not the stack's to close
    assert calls == [("base", "sync", 1), ("base", "metrics")]
    assert one.sampling_version(7) == 7


def test_every_layer_implements_the_interface():
    from reasoning_rl.distributed import FullParameterEngine

    members = ("generate", "update_policy", "pop_metrics", "close", "policy_version")
    for layer in (HFEngine, NativeEngine, InjectedEngine, AsyncEngine, EpisodeEngine):
        assert all(hasattr(layer, m) or m == "policy_version" for m in members), layer
    calls = []
    assert isinstance(_Layer("a", calls), RolloutLayer)
    assert all(hasattr(FullParameterEngine, m) for m in ("generate", "close"))  # the rest: the layer below's


def test_the_run_loop_never_asks_which_layers_the_stack_has():
    """No isinstance, identity test against an engine or ``.inner`` in reasoning_rl/trainer.py."""
    tree = ast.parse(TRAINER.read_text())
    calls = [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "isinstance" not in calls and "getattr" not in calls
    identities = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)
                  and any(isinstance(op, (ast.Is, ast.IsNot)) for op in n.ops)
                  and "engine" in ast.unparse(n)]
    assert identities == []
    assert ".inner" not in TRAINER.read_text()


def test_the_algorithm_says_what_it_samples_next(small_cfg, tmp_path):
    """GRPO and PPO: group_size samples of each prompt at the step's seed; the base class: nothing."""
    from reasoning_rl.algo.ppo import PPOConfig
    from reasoning_rl.trainer import Trainer

    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        examples = trainer.train_examples[:2]
        request = trainer.algorithm.next_request(3, examples)
        assert isinstance(trainer.algorithm, GRPO)
        assert request == Request(step=3, prompts=[e.prompt for e in examples], n=small_cfg.algo.group_size,
                                  sampling=trainer.sampling, seed=step_seed(small_cfg.trainer.seed, 3),
                                  references=[e.reference for e in examples],
                                  fields=[dict(e.fields) for e in examples])
        assert trainer.algorithm.samples_per_prompt() == small_cfg.algo.group_size == 4
        assert Algorithm.next_request(trainer.algorithm, 3, examples) is None  # the default: no prefetch
        assert Algorithm.samples_per_prompt(trainer.algorithm) == small_cfg.algo.samples_per_prompt()  # the settings say
        trainer.context.cfg.algo = PPOConfig(group_size=2)
        ppo = PPO(trainer.context)
        assert ppo.next_request(0, examples).n == 2 == ppo.samples_per_prompt()
    finally:
        trainer.close()


@pytest.mark.parametrize("prompts", [["1+1="]])
def test_the_asynchrony_layer_gets_each_request_with_its_version(prompts):
    """The stack sets what only the asynchrony layer knows (the version, max(0, s - k)) on the
    algorithm's requests."""
    sent = []

    class _Async:
        k, next_step = 1, 0

        def prefetch(self, requests):
            sent.extend(requests)
            self.next_step = requests[-1].step + 1

        def skip_to(self, step):
            self.next_step = step

    class _Sampler:
        def upcoming(self, k, steps):
            return [[0] * k for _ in range(steps)]

    class _Algorithm:
        def next_request(self, step, examples):
            return Request(step=step, prompts=[e for e in examples], n=2, sampling=SamplingConfig(), seed=step)

    base = _Layer("base", [])
    stack = RolloutStack(base=base, policy_engine=base, rollout=base, asynchrony=_Async(), steps=3,
                         prompts_per_step=1)
    stack.prefetch(0, _Algorithm(), _Sampler(), prompts)
    stack.prefetch(1, _Algorithm(), _Sampler(), prompts)
    stack.prefetch(2, _Algorithm(), _Sampler(), prompts)  # step 3 is past the run's last step
    assert [(r.step, r.version) for r in sent] == [(0, 0), (1, 0), (2, 1)]
    assert stack.sampling_version(2) == 1
