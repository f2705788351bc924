"""Parsing Python source into AST objects from several threads at once, safely.

CPython 3.11 counts the depth of the AST objects it builds (``ast.parse``) in one counter per
interpreter. When two threads build at once (a garbage collection inside one runs ``__del__`` code,
and the interpreter switches threads there), the counts mix and ``ast.parse`` raises
``SystemError: AST constructor recursion depth mismatch`` on valid code (python/cpython#106905,
gh-95185's counter). A ``code_feedback`` training run stopped on it: its environments step in
threads (reasoning_rl.envs.episode) and each step parses the attempt and the tests.
Every parse of code that may run in such threads goes through :func:`parse`, which holds one lock;
parsing is CPU work under the GIL, so the lock costs no parallelism (the sandbox waits stay
concurrent). The lock also covers the warning filter that hides the model's SyntaxWarnings
(``warnings.catch_warnings`` changes process-wide state, itself unsafe across threads)."""

from __future__ import annotations

import ast
import threading
import warnings
from typing import Any

PARSE_LOCK = threading.Lock()
"""Held while AST objects are built from source in this process (:func:`parse`)."""


def parse(source: str, mode: str = "exec", quiet: bool = False) -> Any:
    """``ast.parse(source, mode=mode)`` under :data:`PARSE_LOCK`; ``quiet``: the source's SyntaxWarnings
    (``1x``: invalid decimal literal, in code a model wrote) are not printed. Raises SyntaxError as
    ``ast.parse`` does; an ``ast.Module`` (mode exec) or ``ast.Expression`` (eval)."""
    with PARSE_LOCK:
        if not quiet:
            return ast.parse(source, mode=mode)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.parse(source, mode=mode)
