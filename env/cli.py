"""What every invoke task shares: numeric options checked with a clear message,
and expected failures ended as ``invoke.Exit`` instead of a traceback.

Numeric options are declared with string defaults in tasks.py and converted
here: invoke converts an int or float default itself, and a value such as
``--threads two`` would then die in invoke's parser with a traceback.
Unexpected exceptions (bugs) keep their traceback.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable

from invoke import Exit


def _number(option: str, value: object, kind: type, ok: Callable[[float], bool], expectation: str, example: str):
    """``value`` parsed as ``kind`` if ``ok`` accepts it; else Exit naming ``option``, what it takes and an example."""
    try:
        number = kind(str(value).strip())
    except ValueError:
        number = math.nan
    if not ok(number):  # NaN fails every check
        raise Exit(f"{option} must be {expectation}, got {value!r} - pass e.g. {option} {example}")
    return number


def integer(option: str, value: object, minimum: int, meaning: str = "") -> int:
    """``value`` as an int >= ``minimum``."""
    return _number(option, value, int, lambda n: n >= minimum, f"an integer >= {minimum}{meaning}", max(minimum, 1))


def fraction(option: str, value: object, meaning: str = "") -> float:
    """``value`` as a float strictly between 0 and 1."""
    return _number(option, value, float, lambda n: 0.0 < n < 1.0, f"a number between 0 and 1, exclusive{meaning}", 0.1)


def positive(option: str, value: object, unit: str = "") -> float:
    """``value`` as a finite float > 0."""
    return _number(option, value, float, lambda n: 0.0 < n < math.inf, f"a number > 0{unit}", 1.5)


def _resolve(spec) -> type[BaseException] | None:
    if isinstance(spec, type):
        return spec
    module, _, name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def fails_with(command: str, *errors) -> Callable:
    """Decorator for a task: the listed exceptions end it with ``Exit("<command>: <message>")``.

    ``command`` is the task's name as users type it (``bench.serve``).
    ``errors`` are classes or "module:Class" strings; strings are imported only
    when something was raised, so ``invoke --list`` never imports torch.
    """

    def decorate(body: Callable) -> Callable:
        @functools.wraps(body)
        def run(*args, **kwargs):
            try:
                return body(*args, **kwargs)
            except Exit:
                raise
            except Exception as error:
                if any(cls is not None and isinstance(error, cls) for cls in map(_resolve, errors)):
                    raise Exit(f"{command}: {error}") from error
                raise

        return run

    return decorate
