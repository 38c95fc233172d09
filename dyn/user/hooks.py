"""The functions a user's model class declares (``drift``, ``observe_state``, ...): found on the
class, their parameter names checked against ``params``, a failing call made one line. Read by
:mod:`dyn.user.model`, :mod:`dyn.user.observe` and :mod:`dyn.user.reach`.
"""

from __future__ import annotations

import inspect
import re

from ..core.errors import ScenarioError
from . import arrays


def _function(cls, attr: str):
    """The class's own `attr` (from the first class of its MRO that defines it; a staticmethod
    unwrapped), or None."""
    fn = None
    for base in cls.__mro__:
        if attr in base.__dict__:
            fn = base.__dict__[attr]
            break
    return fn.__func__ if isinstance(fn, staticmethod) else fn


def _arguments(cls, attr: str, fn, leading: tuple[str, ...]) -> list[str]:
    """The parameter names `fn` takes after its leading arguments, each declared in params."""
    names = list(inspect.signature(getattr(fn, "py_func", fn)).parameters)
    if names[: len(leading)] != list(leading):
        raise ScenarioError(
            "scenario.system",
            f"{cls.__name__}.{attr} must take ({', '.join(leading)}, <parameters>), got ({', '.join(names)})",
        )
    params = names[len(leading) :]
    for name in params:
        field = cls.params.get(name)
        if field is None or field.kind not in ("int", "float", "bool", *arrays.KINDS):
            raise ScenarioError(
                "scenario.system",
                f"{cls.__name__}.{attr} takes {name!r}, which "
                "is not a parameter of params of kind int, float, bool, vector, "
                "matrix or matrices",
            )
    return params


# numba's words for a plain Python function called from compiled code
PLAIN_HELPER = re.compile(
    r"Untyped global name '(\w+)': Cannot determine Numba type of <class "
    r"'function'>"
)


def _call(name: str, probe):
    """probe(), its failure one line naming the user's function and exception."""
    try:
        return probe()
    except ScenarioError:
        raise
    except Exception as exc:
        # numba's typing errors wrap the cause in lines of pipeline steps: keep the cause
        lines = [t.strip() for t in str(exc).strip().splitlines() if t.strip()]
        causes = [t for t in lines if not t.startswith(("Failed in", "During:", "File ", "<source missing"))]
        text = " / ".join(dict.fromkeys(causes or lines)) or "(no message)"
        helper = PLAIN_HELPER.search(text)
        if helper:  # the one rule numba imposes that users meet first: say it before the trace
            text = (
                f"{helper.group(1)} is a plain Python function, and numba compiles the drift "
                f"with every function it calls: decorate {helper.group(1)} with @numba.njit "
                f"(or give drift_jax and run a JAX backend) / {text}"
            )
        raise ScenarioError(
            "scenario.system", f"{name} failed at the start state: {type(exc).__name__}: {text}"
        ) from None
