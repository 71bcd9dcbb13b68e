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

import builtins
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T", bound=type)

compiled = False  # as cython.compiled: True only inside a compiled module

# C types, as names for `declare` (running as Python they stand for the Python type that holds the value).
Py_ssize_t = int
longlong = int
double = float
bint = bool
int = builtins.int
ulonglong = builtins.int
# C pointers (lagd.state.apply reaches an array's memory through them, compiled only)
p_char = Any
p_longlong = Any
p_ulonglong = Any
NULL: Any = None  # a C null pointer, used compiled only


def declare(kind: object, value: Any = None) -> Any:
    """`name = cython.declare(cython.longlong, value)`: a C variable compiled, the value as Python."""
    return value


def cfunc(function: F) -> F:
    """A C function compiled (called from the module only); the function itself as Python."""
    return function


def inline(function: F) -> F:
    """Inlined into its callers compiled; the function itself as Python."""
    return function


def cclass(cls: T) -> T:
    """An extension type compiled (its annotated attributes C fields); the class itself as Python."""
    return cls


def cast(kind: Any, value: Any) -> Any:
    """`cython.cast(tuple, obj)`: the value unchecked compiled; the value itself as Python."""
    return value


def address(value: Any) -> Any:
    """`&value` compiled; only used inside `if cython.compiled:`."""
    raise NotImplementedError("cython.address runs only compiled")


def exceptval(*args: Any, **kwargs: Any) -> Callable[[F], F]:
    """How a C function signals an exception, compiled; the function itself as Python."""
    return lambda function: function
