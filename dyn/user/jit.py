"""The one place a user's numba functions are compiled: into the integrators' ABI.

A user writes a vector field as a plain function of named parameters, ``f(t, x, theta, sigma)
-> array like x``. The numba backend calls a drift of fixed type ``drift(t, x, p, out, work)``
(``integrators.numba_abi.DRIFT_SIG``), ``p`` the flat parameter vector the engine packs. This
module makes the adapter: a function of that type which reads each parameter from its place in
``p`` and writes the user's value into ``out``. The adapter's source is generated (its argument
list depends on the user's), so numba cannot cache it: it is compiled once per process, which
takes a fraction of a second for a small field (the integrators' kernels stay cached).
"""
from __future__ import annotations

import numba
from numba.extending import is_jitted

from integrators.numba_abi import DIFFUSION_SIG, DRIFT_SIG

# as the project's kernels (integrators.numba_abi.NJIT) but without cache: a generated function
# has no file for numba's cache to key on
OPTIONS = dict(nogil=True, error_model="numpy")
SIGNATURES = {"drift": ("(t, x, p, out, work)", "t, x", DRIFT_SIG),
              "diffusion": ("(t, x, p, dw, out, work)", "t, x, dw", DIFFUSION_SIG)}


def jitted(fn):
    """`fn` as a numba function (already one: unchanged)."""
    if is_jitted(fn):
        return fn
    return numba.njit(**OPTIONS)(fn)


def with_params(fn, leading: str, at: tuple[int, ...], name: str = "bound"):
    """A numba function ``name(<leading>, p) = fn(<leading>, p[at_0], p[at_1], ...)``: a user's
    function of named parameters, reading them from the packed vector."""
    args = "".join(f", p[{i}]" for i in at)
    source = f"def {name}({leading}, p):\n    return user({leading}{args})\n"
    space = {"user": jitted(fn)}
    exec(compile(source, f"<dyn.user.jit {name}>", "exec"), space)
    return numba.njit(**OPTIONS)(space[name])


def abi(kind: str, fn, at: tuple[int, ...]):
    """The ABI function (kind "drift" or "diffusion") that writes ``fn(t, x, [dw,] p[at]...)``
    into ``out``."""
    params, leading, signature = SIGNATURES[kind]
    bound = with_params(fn, leading, at, f"user_{kind}")
    source = f"def {kind}{params}:\n    out[:, :] = bound({leading}, p)\n"
    space = {"bound": bound}
    exec(compile(source, f"<dyn.user.jit {kind}>", "exec"), space)
    return numba.njit(signature, **OPTIONS)(space[kind])
