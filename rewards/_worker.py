"""Entry point of a reward worker process: ``python -m rewards._worker <inbox fd> <outbox fd>``."""

import sys
from multiprocessing.connection import Connection

from rewards.pool import _worker_main

if __name__ == "__main__":
    _worker_main(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
