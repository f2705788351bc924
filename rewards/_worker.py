"""Entry point of a reward worker process, started by :class:`rewards.pool.WorkerPool` with the parent's
``sys.path`` (``rewards.pool.WORKER_BOOT``): ``main(<inbox fd>, <outbox fd>)``."""

from multiprocessing.connection import Connection

from rewards.pool import _worker_main


def main(inbox_fd: int, outbox_fd: int) -> None:
    _worker_main(Connection(inbox_fd, writable=False), Connection(outbox_fd, readable=False))
