"""Module-level verifiers for batch tests (worker processes import them by name)."""

import os
import time

from rewards import VerifierResult


def echo_float(completion, reference, **fields):
    return float(completion == reference)


def misbehaving(completion, reference, **fields):
    """Behaves according to the completion text."""
    if completion == "hang":
        while True:
            time.sleep(0.05)
    if completion == "spin":
        while True:
            pass
    if completion == "crash":
        os._exit(7)
    if completion == "raise":
        raise RuntimeError("verifier bug")
    if completion == "exit":
        raise SystemExit(0)
    if completion == "none":
        return None
    return VerifierResult.ok(float(completion == reference), seen=completion)
