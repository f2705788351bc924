"""Read an offline W&B run back: the records of its ``run-<id>.wandb`` file.

The file is a LevelDB-style log (wandb's datastore): a 7-byte header (``:W&B``, magic 0xBEE1, version),
then 32 KiB blocks of records, each ``crc32 (4) | length (2, little-endian) | type (1) | data``, where
type 1 is a whole record and 2/3/4 the first/middle/last piece of one split over blocks; a block's tail
shorter than a record header is padding. Each record's data is a ``wandb_internal.Record`` protobuf."""

from __future__ import annotations

import struct
from pathlib import Path

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    raw = Path(path).read_bytes()
    assert raw[:4] == b":W&B", f"{path} is not a W&B run file"
    out, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(raw):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # padding at a block's end
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos:pos + HEADER])
        if pos + HEADER + length > len(raw):  # a record still being written
            break
        data = raw[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, FIRST):
            pending = data
        elif kind in (MIDDLE, LAST):
            pending += data
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def read_finished_run(path: Path, timeout: float = 60.0) -> list:
    """The records of a finished run: ``run.finish()`` can return before wandb-core has written the
    last records, so the file is read again until its ``exit`` record is there."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        records = read_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def history(records: list) -> list[dict[str, float]]:
    """The logged rows, each with its ``_step``."""
    import json

    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item})
    return rows
