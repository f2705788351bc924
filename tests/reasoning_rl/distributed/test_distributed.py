"""Data-parallel training (reasoning_rl.distributed): two gloo processes on the CPU give the
single-process update, replicated or sharded with FSDP2 (trainer.fsdp), rank 0 alone writes
checkpoints and the CLI's run-folder files, resume is exact; the pure parts (metric reductions,
sharding, the world-size check, the FSDP combinations refused) on hand-made inputs."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reasoning_rl import distributed
from reasoning_rl.algo.aggregation import LossNormalizer
from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.algo.optim import clip_and_measure
from reasoning_rl.config import TrainConfig
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.distributed import process_group
from reasoning_rl.policy.loading import load_model, load_pretrained
from reasoning_rl.rollouts.prompt_sampler import PromptSampler
from reasoning_rl.run_folder.checkpoint import STATE_FILE, list_checkpoints
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.settings.model import ModelConfig, TinyModelConfig
from reasoning_rl.trainer import check_world_size
from reasoning_rl.validation import validate
from tests.conftest import assert_close_up_to_rounding, decoder_terms, free_port

WORKER = Path(__file__).with_name("dist_worker.py")
REPO = Path(__file__).resolve().parents[3]


def _launch(world: int, out: Path, run: Path, steps: int, *flags: str) -> subprocess.Popen:
    """dist_worker.py in one process or under torchrun; ``flags``: resume, fsdp, cli."""
    out.mkdir(parents=True, exist_ok=True)
    return _spawn(world, [str(WORKER), str(out), str(run), str(steps), *flags])


def _spawn(world: int, args: list[str]) -> subprocess.Popen:
    """The script and arguments ``args`` in one process or under torchrun with ``world`` ranks."""
    if world == 1:
        cmd = [sys.executable, *args]
    else:
        torchrun = shutil.which("torchrun") or pytest.skip("torchrun is not on PATH")
        cmd = [torchrun, "--nproc_per_node", str(world), "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), *args]
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    return env


def _node(endpoint: str, args: list[str], *rdzv_conf: str) -> subprocess.Popen:
    """One "node" of a two-node launch: ``python -m reasoning_rl.launch.torchrun --nnodes=2 --nproc_per_node=1``
    with the c10d rendezvous at ``endpoint`` (two of these on this host stand in for two machines)."""
    cmd = [sys.executable, "-m", "reasoning_rl.launch.torchrun", "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
           f"--rdzv_endpoint={endpoint}", "--rdzv_id=two-nodes",
           *([f"--rdzv_conf={','.join(rdzv_conf)}"] if rdzv_conf else []), *args]
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _two_nodes(out: Path, run: Path, steps: int, *flags: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [_node(endpoint, [str(WORKER), str(out), str(run), str(steps), *flags]) for _ in range(2)]
    for proc in nodes:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, (stdout + stderr)[-4000:]


def _wait(proc: subprocess.Popen) -> None:
    output, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, output[-4000:]


class _SingleRun:
    """The one-process reference run (3 steps), started once for the module and awaited on first use."""

    def __init__(self, root: Path) -> None:
        self.out, self.run = root / "out1", root / "run1"
        self.proc: subprocess.Popen | None = _launch(1, self.out, self.run, 3)

    def result(self) -> dict:
        if self.proc is not None:
            _wait(self.proc)
            self.proc = None
        return torch.load(self.out / "rank0.pt")


@pytest.fixture(scope="module")
def single_run(tmp_path_factory) -> _SingleRun:
    return _SingleRun(tmp_path_factory.mktemp("single"))


def _terms() -> int:
    """Terms along the runs' chain (tests/conftest.py's rule): dist_worker.py's tiny decoder over rows of under 64
    positions, its gradients summed over a step's 4 x 4 rows, through 3 steps."""
    config = load_model(ModelConfig(tiny=TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2,
                                                          intermediate_size=64)))[0].config
    return 3 * decoder_terms(config, 64, rows=16)


def _assert_same_global_metrics(run1: Path, run2: Path) -> None:
    m1, m2 = read_metrics(run1 / "metrics.jsonl"), read_metrics(run2 / "metrics.jsonl")
    assert [m["step"] for m in m2] == [1, 2, 3]
    for a, b in zip(m1, m2):
        for key in ("grad/norm", "loss/total", "loss/policy", "kl/mean", "entropy/mean", "reward/mean",
                    "completion/tokens", "rollout/policy_version"):
            # kl/mean is a difference of nearly equal log-probs: their scale (about log V = 4.6), not its own.
            assert_close_up_to_rounding(b[key], a[key], terms=_terms(), scale=max(abs(a[key]), 4.6),
                                        msg=f"step {a['step']} {key}")


@pytest.mark.numerics
@pytest.mark.slow
def test_two_gloo_ranks_give_the_single_process_update_write_once_and_resume(tmp_path, single_run):
    """Same global prompts, same completions (a fixed engine: dist_worker.FixedEngine), so the
    runs must agree: the gradient each optimiser step applies (summed over ranks, clipped on the
    global norm; 0.05 here, so the pre-clip norm in the metrics is compared too), the logged
    global metrics, the final weights. Rank 0 alone writes checkpoints, slowly (0.3 s each):
    rank 1 finds every one complete when save() returns, so it waited at the barrier. The first
    2-rank launch goes through the CLI (reasoning_rl.cli.run_training): rank 0 alone writes
    config.yaml, status.json and eval_table.md and prints the summary."""
    _wait(_launch(2, tmp_path / "out2", tmp_path / "run2", 2, "cli"))
    _wait(_launch(2, tmp_path / "out3", tmp_path / "run2", 3, "resume"))  # continue the 2-rank run
    one = single_run.result()
    two = [torch.load(tmp_path / "out2" / f"rank{r}.pt") for r in (0, 1)]
    resumed = [torch.load(tmp_path / "out3" / f"rank{r}.pt") for r in (0, 1)]
    assert one["world_size"] == 1 and two[0]["world_size"] == 2

    # The update: steps 1-2 of the 2-rank run, then step 3 after its resume, against one process.
    applied = [*two[0]["grads"], *resumed[0]["grads"]]
    assert len(applied) == len(one["grads"]) == 3
    for step, (g2, g1) in enumerate(zip(applied, one["grads"]), start=1):
        assert g1.abs().max() > 0, step
        assert_close_up_to_rounding(g2, g1, terms=_terms(), msg=f"step {step}")
    for r0, r1 in zip([*two[0]["grads"], *resumed[0]["grads"]], [*two[1]["grads"], *resumed[1]["grads"]]):
        assert torch.equal(r0, r1)  # both ranks step on the same all-reduced gradient
    assert_close_up_to_rounding(resumed[0]["params"], one["params"], terms=_terms())
    assert torch.equal(resumed[0]["params"], resumed[1]["params"])

    # Global metrics (rank 0 logs the ranks' combined values; docs/metrics.md).
    _assert_same_global_metrics(single_run.run, tmp_path / "run2")
    rows = [json.loads(line) for line in (tmp_path / "run2" / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 4 * 4 and {r["rank"] for r in rows} == {0, 1}  # every rank's samples, once
    assert [r["policy_version"] for r in rows[::16]] == [0, 1, 2]

    # Checkpoints: written by rank 0 only, complete when any rank's save() returned, nothing half-written.
    assert two[0]["writes"] == ["checkpoint-1", "checkpoint-2"] and two[1]["writes"] == []
    assert resumed[0]["writes"] == ["checkpoint-3"] and resumed[1]["writes"] == []
    assert all(two[1]["seen_complete"]) and all(resumed[1]["seen_complete"]) and len(two[1]["seen_complete"]) == 2
    assert [p.name for p in list_checkpoints(tmp_path / "run2")] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert not [p for p in (tmp_path / "run2").iterdir() if p.name.endswith((".tmp", ".old"))]
    state = torch.load(tmp_path / "run2" / "checkpoint-3" / STATE_FILE, weights_only=False)
    assert state["step"] == 3 and state["sampler"] == {"epoch": 0, "position": 12}

    # The CLI under torchrun: one writer of the run folder's own files, one printed summary.
    assert two[0]["cli_writes"] == ["config.yaml", "status:running", "status:finished", "eval_table.md"]
    assert two[1]["cli_writes"] == [] and two[1]["printed"] == ""
    assert "run folder: " + str(tmp_path / "run2") in two[0]["printed"]
    assert json.loads((tmp_path / "run2" / "status.json").read_text())["status"] == "finished"


@pytest.mark.numerics
@pytest.mark.slow
def test_fsdp_two_gloo_ranks_give_the_single_process_update_checkpoint_whole_and_resume(tmp_path, single_run):
    """trainer.fsdp=true: the policy and the reference are sharded (each rank holds half the
    parameters), FSDP reduce-scatters the gradients, and the update is still the single process's:
    the applied (full) gradients of steps 1-2, then of step 3 after a resumed 2-rank run, the global
    grad norm before clipping at 0.05, the metrics, the final weights. Checkpoints are written by
    rank 0 alone as ordinary save_pretrained folders holding the full weights (they load and equal
    the trained weights) and the full AdamW state (that of the single-process run)."""
    _wait(_launch(2, tmp_path / "out2", tmp_path / "run2", 2, "fsdp"))
    _wait(_launch(2, tmp_path / "out3", tmp_path / "run2", 3, "fsdp", "resume"))
    one = single_run.result()
    two = [torch.load(tmp_path / "out2" / f"rank{r}.pt") for r in (0, 1)]
    resumed = [torch.load(tmp_path / "out3" / f"rank{r}.pt") for r in (0, 1)]
    assert two[0]["sharded"] == [True, True] and resumed[1]["sharded"] == [True, True]  # policy, reference
    total = one["params"].numel()
    assert two[0]["local_numel"] + two[1]["local_numel"] == total and two[0]["local_numel"] < 0.51 * total

    applied = [*two[0]["grads"], *resumed[0]["grads"]]
    assert len(applied) == len(one["grads"]) == 3
    for step, (g2, g1) in enumerate(zip(applied, one["grads"]), start=1):
        assert g1.abs().max() > 0, step
        assert_close_up_to_rounding(g2, g1, terms=_terms(), msg=f"step {step}")
    assert_close_up_to_rounding(resumed[0]["params"], one["params"], terms=_terms())
    assert torch.equal(resumed[0]["params"], resumed[1]["params"])
    _assert_same_global_metrics(single_run.run, tmp_path / "run2")

    assert two[0]["writes"] == ["checkpoint-1", "checkpoint-2"] and two[1]["writes"] == []
    assert resumed[0]["writes"] == ["checkpoint-3"] and resumed[1]["writes"] == []
    assert all(two[1]["seen_complete"]) and len(two[1]["seen_complete"]) == 2
    final = tmp_path / "run2" / "checkpoint-3"
    model, _ = load_pretrained(str(final))
    assert json.loads((final / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    torch.testing.assert_close(torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
                               resumed[0]["params"], rtol=0, atol=0)
    sharded_state = torch.load(final / STATE_FILE, weights_only=False)["optimizer"]["state"]
    single_state = torch.load(single_run.run / "checkpoint-3" / STATE_FILE, weights_only=False)["optimizer"]["state"]
    assert sharded_state.keys() == single_state.keys()
    for i, moments in single_state.items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert_close_up_to_rounding(sharded_state[i][key], moments[key], terms=_terms(), msg=f"{i} {key}")


# -- two nodes: torchrun --nnodes=2 twice on this host (tests selected by -k two_nodes) --------------

@pytest.mark.numerics
@pytest.mark.slow
@pytest.mark.parametrize("flags", [(), ("fsdp",)], ids=["replicated", "fsdp"])
def test_two_nodes_give_the_single_process_update(tmp_path, single_run, flags):
    """Two launches of ``torchrun --nnodes=2 --nproc_per_node=1`` meeting at a c10d rendezvous on
    127.0.0.1 (what two machines of a Slurm allocation run, scripts/slurm/multinode.sbatch): rank 0
    and rank 1 are in different launches, and the update is still the single process's, to the
    same tolerance as the two-rank tests: the gradient applied at each of the 3 steps, the final
    weights, the global metrics; rank 0 alone writes checkpoints."""
    _two_nodes(tmp_path / "out", tmp_path / "run", 3, *flags)
    one = single_run.result()
    two = [torch.load(tmp_path / "out" / f"rank{r}.pt") for r in (0, 1)]
    assert two[0]["world_size"] == 2
    if flags:
        assert two[0]["sharded"] == [True, True]
    for step, (g2, g1) in enumerate(zip(two[0]["grads"], one["grads"], strict=True), start=1):
        assert g1.abs().max() > 0, step
        assert_close_up_to_rounding(g2, g1, terms=_terms(), msg=f"step {step}")
    assert_close_up_to_rounding(two[0]["params"], one["params"], terms=_terms())
    assert torch.equal(two[0]["params"], two[1]["params"])
    _assert_same_global_metrics(single_run.run, tmp_path / "run")
    assert two[0]["writes"] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"] and two[1]["writes"] == []


def test_two_nodes_a_node_that_never_joins_fails_within_the_rendezvous_timeout_in_one_line(tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    alone = _node(endpoint, [str(WORKER), str(tmp_path / "out"), str(tmp_path / "run"), "1"], "join_timeout=5")
    _, stderr = alone.communicate(timeout=120)
    assert alone.returncode == 2
    assert stderr.strip().splitlines() == [
        f"reasoning_rl.launch.torchrun: the rendezvous at {endpoint} timed out after 5 s: --nnodes=2 nodes were expected "
        "and fewer joined; start the same command on every node (srun with one task per node does) or lower --nnodes"]
    assert not (tmp_path / "run").exists()


def test_two_nodes_an_endpoint_that_cannot_be_reached_is_named_in_one_line(tmp_path):
    # The second node's view when the first is not up: nothing listens at the endpoint.
    endpoint = f"127.0.0.1:{free_port()}"
    node = _node(endpoint, [str(WORKER), str(tmp_path / "out"), str(tmp_path / "run"), "1"],
                 "is_host=false", "read_timeout=2")
    _, stderr = node.communicate(timeout=120)
    assert node.returncode == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"reasoning_rl.launch.torchrun: cannot reach the rendezvous endpoint {endpoint} within 2 s ("), stderr


# -- the pure parts ---------------------------------------------------------------------------------

@pytest.mark.parametrize("setting, message", [
    ({"algo": "ppo"}, r"trainer.fsdp=true does not support algo.name='ppo': its critic"),
    ({"algo": "sft"}, r"does not support algo.name='sft': a rank without samples"),
    ({"rollout.backend": "vllm"}, r"rollout.backend=vllm is not supported"),
    ({"algo.dynamic_sampling.enabled": True}, r"algo.dynamic_sampling.enabled=true is not supported.*wait forever"),
    ({"algo.kl.ref_reset_every": 5}, r"algo.kl.ref_reset_every > 0 is not supported"),
])
def test_fsdp_refuses_the_combinations_it_does_not_handle(setting, message):
    from reasoning_rl.algo.registry import get_algorithm

    cfg = TrainConfig(algo=GRPOConfig())
    cfg.trainer.fsdp = True
    validate(cfg)  # GRPO with hf rollouts: accepted
    for key, value in setting.items():
        if key == "algo":
            cfg.algo = get_algorithm(value).config_class()
        else:
            *path, name = key.split(".")
            setattr(functools.reduce(getattr, path, cfg), name, value)
    with pytest.raises(ConfigError, match=message):
        validate(cfg)
    cfg.trainer.fsdp = False
    validate(cfg)  # the same settings without FSDP are fine


def test_metrics_are_summed_maxed_token_weighted_or_averaged_by_their_key():
    rank0 = {"loss/total": 0.25, "completion/tokens": 30, "completion/length_max": 7, "time/step": 1.0,
             "kl/mean": 0.1, "reward/mean": 0.5, "grad/norm": 2.0, "verifier/timeouts": 1, "reward/std": float("nan")}
    rank1 = {"loss/total": -0.05, "completion/tokens": 10, "completion/length_max": 9, "time/step": 1.5,
             "kl/mean": 0.5, "reward/mean": 0.25, "grad/norm": 2.0, "verifier/timeouts": 0, "reward/std": 0.4}
    out = distributed.combine_metrics([rank0, rank1])
    assert out["loss/total"] == pytest.approx(0.20)        # shares of one global loss: 0.25 - 0.05
    assert out["completion/tokens"] == 40 and isinstance(out["completion/tokens"], int)
    assert out["verifier/timeouts"] == 1
    assert out["completion/length_max"] == 9 and out["time/step"] == 1.5  # the slowest rank
    assert out["kl/mean"] == pytest.approx(0.2)            # (0.1 * 30 + 0.5 * 10) / 40
    assert out["reward/mean"] == pytest.approx(0.375)      # equal shards: the plain mean
    assert out["grad/norm"] == 2.0                         # the same on every rank
    assert out["reward/std"] == pytest.approx(0.4)         # non-finite values are left out


def test_each_rank_gets_its_shard_of_the_same_global_draw(monkeypatch):
    draws = {}
    for r in (0, 1):
        monkeypatch.setattr(process_group, "world_size", lambda: 2)
        monkeypatch.setattr(process_group, "rank", lambda r=r: r)
        sampler = PromptSampler(10, seed=3)
        draws[r] = [sampler.next(4), sampler.next(4)]
        assert sampler.state_dict() == {"epoch": 0, "position": 8}  # every rank advances by the global 4
    monkeypatch.undo()
    whole = PromptSampler(10, seed=3)
    for k in range(2):
        assert draws[0][k] + draws[1][k] == whole.next(4)


def test_a_batch_that_does_not_split_over_the_ranks_says_what_to_do(monkeypatch):
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.algo.prompts_per_step = 6
    check_world_size(cfg, 2)
    with pytest.raises(ConfigError, match=r"algo.prompts_per_step=6 cannot be split evenly over 4 ranks.*multiple of 4"):
        check_world_size(cfg, 4)
    monkeypatch.setattr(process_group, "world_size", lambda: 4)
    with pytest.raises(ValueError, match="cannot be split evenly over 4 ranks"):
        PromptSampler(10, seed=0).next(6)


def test_a_single_process_makes_no_collective_calls(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch.distributed called in a single process")

    for name in ("all_reduce", "broadcast", "barrier", "all_gather_object", "broadcast_object_list"):
        monkeypatch.setattr(torch.distributed, name, refuse)
    norm = LossNormalizer.for_batch([3, 0, 5], max_tokens=8)
    assert (norm.num_sequences, norm.num_tokens, norm.max_tokens) == (3.0, 8.0, 8.0)
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])
    assert clip_and_measure([p], 0.0) == pytest.approx(5.0)
    assert distributed.reduce_metrics({"loss/total": 1.0}) == {"loss/total": 1.0}
    assert distributed.rank_seed(7) == 7 and distributed.is_main()
    distributed.barrier()


def test_rank_0_alone_generates_from_an_fsdp_policy_without_waiting_for_the_others():
    """Held-out evaluation runs on rank 0 only. transformers' generate would all-reduce after every
    token of an FSDP-managed model (synced_gpus), a collective rank 1 never joins: the CLI hung
    there. The HF engine generates on its own rank."""
    proc = _spawn(2, [str(WORKER.with_name("fsdp_generate_worker.py"))])
    try:
        output, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail("rank 0's generate waited for the other rank (a collective in generate):\n" + output[-3000:])
    assert proc.returncode == 0, output[-4000:]
    assert "completions: [" in output
