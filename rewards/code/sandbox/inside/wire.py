"""The one framing of every message between the host and the jail, and inside the jail.

A message is a 4-byte big-endian length followed by that many bytes of JSON. It travels on the
pipes between the host and the zygote Z (:func:`write_frame`, :func:`read_frame`) and on the
socket pairs between Z, the program server P and the candidate C (:func:`sock_send`,
:func:`sock_recv`, which can also pass file descriptors along with a message). Both readers
decode through :func:`_read_message`, so a frame means the same on every channel.

Standard library only: the host imports it from here, and the jail runs it from here.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

MAX_FRAME = 64 << 20  # a larger message from the sandbox is a protocol error


def _pack(obj: Any) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack(">I", len(data)) + data


def _read_exact(read: Callable[[int], bytes], n: int) -> bytes | None:
    """Exactly ``n`` bytes from ``read``; None at end of stream."""
    buf = bytearray()
    while len(buf) < n:
        chunk = read(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_message(read: Callable[[int], bytes], head: bytes = b"") -> Any:
    """The message whose first bytes (``head``) may already have arrived; None at end of stream."""
    if len(head) < 4:
        rest = _read_exact(read, 4 - len(head))
        if rest is None:
            return None
        head += rest
    (size,) = struct.unpack(">I", head)
    if size > MAX_FRAME:
        raise ValueError(f"message of {size} bytes exceeds the {MAX_FRAME}-byte limit")
    body = _read_exact(read, size)
    return None if body is None else json.loads(body)


def write_frame(fd: int, obj: Any) -> None:
    data = memoryview(_pack(obj))
    while data:
        n = os.write(fd, data)
        data = data[n:]


def read_frame(fd: int, deadline: float | None = None) -> Any:
    """Next message from ``fd``; None at end of file; TimeoutError past ``deadline``."""

    def read(n: int) -> bytes:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        return os.read(fd, n)

    return _read_message(read)


def sock_send(sock: socket.socket, obj: Any, fds: Sequence[int] = ()) -> None:
    data = _pack(obj)
    if fds:
        socket.send_fds(sock, [data[:4]], list(fds))
        sock.sendall(data[4:])
    else:
        sock.sendall(data)


def sock_recv(sock: socket.socket, with_fds: bool = False) -> Any:
    """Next message (and received fds when ``with_fds``); None at end of stream."""
    if not with_fds:
        return _read_message(sock.recv)
    head, fds, _, _ = socket.recv_fds(sock, 4, 4)
    if not head:
        return None, fds
    return _read_message(sock.recv, head), fds
