"""``python -m reasoning_rl.launch.torchrun <torchrun's arguments>``: torchrun, with a failed
rendezvous said in one line and exit code 2.

On several nodes each node runs the same command (``scripts/slurm/multinode.sbatch`` does it with
``srun``), and torchrun's c10d rendezvous at ``--rdzv_endpoint`` (the first node) gathers them::

    python -m reasoning_rl.launch.torchrun --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \\
        --rdzv_endpoint=<first node>:29500 --rdzv_id=<job id> -m reasoning_rl.cli trainer.steps=300

Everything is torchrun's own (``torch.distributed.run``); only two failures that are the user's to
fix are worded here, instead of torchrun's traceback:

- a node that never joins: the rendezvous times out after ``join_timeout`` (torchrun's
  ``--rdzv_conf=join_timeout=<s>``, default 600) naming the nodes expected;
- an endpoint that cannot be reached (a wrong address, a closed port, the first node not up):
  named, with its ``read_timeout``.

A training process that fails keeps torchrun's own report (exit code 1). This module sits outside
``reasoning_rl.distributed`` (which imports torch) so that torch's C++ warnings can be quietened for
the launcher alone, before torch loads: a failed connection otherwise prints a C++ stack per retry.
The training processes it starts get the environment as it was.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from reasoning_rl.entry_points import report_user_error
from reasoning_rl.errors import UserError

PROG = "reasoning_rl.launch.torchrun"


class RendezvousFailed(UserError, RuntimeError):
    """The nodes of a multi-node launch did not meet."""


def _conf(args: Any, key: str, default: str) -> str:
    """A value of ``--rdzv_conf=key=value,...``."""
    for item in (args.rdzv_conf or "").split(","):
        name, _, value = item.partition("=")
        if name.strip() == key:
            return value.strip()
    return default


def rendezvous_message(exc: BaseException, args: Any) -> str | None:
    """One line for a rendezvous that failed (``exc`` or what caused it); None for anything else."""
    from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError, RendezvousTimeoutError

    endpoint = args.rdzv_endpoint or f"{args.master_addr}:{args.master_port}"
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, RendezvousTimeoutError):
            return (f"the rendezvous at {endpoint} timed out after {_conf(args, 'join_timeout', '600')} s: "
                    f"--nnodes={args.nnodes} nodes were expected and fewer joined; start the same command on every "
                    "node (srun with one task per node does) or lower --nnodes")
        if isinstance(seen, RendezvousConnectionError):
            inner = seen.__cause__
            why = " ".join(str(inner).split())[:200] if inner is not None else "no answer"
            return (f"cannot reach the rendezvous endpoint {endpoint} within {_conf(args, 'read_timeout', '60')} s "
                    f"({why}); check the first node's address and that its port is open to this node "
                    "(--rdzv_endpoint)")
        seen = seen.__cause__ or seen.__context__
    return None


def main(argv: list[str] | None = None) -> int:
    previous = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = previous or "FATAL"  # read once, when torch loads
    from torch.distributed.run import parse_args, run

    if previous is None:
        del os.environ["TORCH_CPP_LOG_LEVEL"]

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except Exception as exc:
        message = rendezvous_message(exc, args)
        if message is None:
            raise
        return report_user_error(PROG, RendezvousFailed(message), exc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
