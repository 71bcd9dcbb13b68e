"""What lagd's Cython-compiled modules use of the `cython` module, for running them as plain Python
where Cython is not installed (lagd needs Cython only to build; its modules then run uncompiled).

A module compiled by Cython in pure-Python mode (hatch_build.py; lagd.http.burrow_json is one) starts
with `import cython`, falling back to this module: the compiler reads the `cython.*` decorators,
declarations and annotations as C types and C functions; run as Python the decorators return what
they decorate, `declare` returns its value, and the type names are only names (an annotation is
never evaluated: those modules use `from __future__ import annotations`). Cython's own `cython`
module, where installed, does the same. Add here what such a module starts to use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

compiled = False  # as cython.compiled: True only inside a compiled module

# C types, as names for `declare` (running as Python they stand for the Python type that holds the value).
Py_ssize_t = int
longlong = int
double = float
bint = bool


def declare(kind: object, value: Any = None) -> Any:
    """`name = cython.declare(cython.longlong, value)`: a C variable compiled, the value as Python."""
    return value


def cfunc(function: F) -> F:
    """A C function compiled (called from the module only); the function itself as Python."""
    return function


def inline(function: F) -> F:
    """Inlined into its callers compiled; the function itself as Python."""
    return function
