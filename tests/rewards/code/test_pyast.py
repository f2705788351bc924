"""Parsing from many threads at once: CPython 3.11's AST depth counter is per interpreter, and threads
that build ASTs together (a garbage collection in one switches to another) made ``ast.parse`` raise
"SystemError: AST constructor recursion depth mismatch" in a code_feedback training run."""

from __future__ import annotations

import gc
import threading
from concurrent.futures import ThreadPoolExecutor

from rewards.code.formats import defines_function
from rewards.code.pyast import PARSE_LOCK, parse

SOURCE = "\n".join(f"def f{i}(x):\n    return [((x + {i}) * 2 - 1) for _ in range(3) if x > {i}]"
                   for i in range(200))


class Cyclic:
    """Garbage in cycles with a finalizer: the collector runs Python code (and may switch threads)
    in the middle of another allocation, such as one of the parser's."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        sum(range(50))


def _parse_under_gc_pressure(_: int) -> list[str]:
    errors = []
    for _ in range(10):
        junk = [Cyclic() for _ in range(200)]
        del junk
        try:
            parse(SOURCE)
        except SystemError as e:  # what ast.parse alone raised here in 7 of 8 threads
            errors.append(str(e))
    return errors


def test_parse_from_eight_threads_under_garbage_collection():
    thresholds = gc.get_threshold()
    gc.set_threshold(50, 5, 5)
    try:
        with ThreadPoolExecutor(8) as threads:
            errors = [e for found in threads.map(_parse_under_gc_pressure, range(8)) for e in found]
    finally:
        gc.set_threshold(*thresholds)
    assert errors == []


def test_parse_waits_for_the_lock_and_hides_the_models_syntax_warnings(recwarn):
    done = threading.Event()
    with PARSE_LOCK:
        worker = threading.Thread(target=lambda: (defines_function("def f(x):\n    return 1x\n", "f"), done.set()))
        worker.start()
        assert not done.wait(0.2)  # defines_function parses under the lock
    worker.join(5)
    assert done.is_set()
    assert defines_function("def f(x):\n    return x if 1else 2\n", "f")
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]
    assert parse("x + 1", mode="eval").body.op.__class__.__name__ == "Add"
