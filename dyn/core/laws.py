r"""Random array parameters: a scenario gives a matrix (or a stack of them, or a vector) by a
named law instead of its entries, as a table

    Q = {law = "gaussian", scale = 0.5, draw = "run"}

- law "gaussian": entries i.i.d. N(0, scale^2 / size) (so |M x| is about scale |x|);
  "orthogonal": scale times a Haar-distributed orthogonal matrix (the Q of the QR decomposition
  of a Gaussian matrix, its columns' signs fixed by R's diagonal); "identity": scale times I;
- scale: a number (default 1);
- draw: "point" (one draw per sweep point, from the point's stream: points differing only along
  common axes share it), "run" (one per run of the point: run r's draw is the same whatever the
  chunking or the executor), or "common" (one for the whole sweep, :func:`sweep.common_rng`:
  common random matrices across points);
- size: the matrix's order (default: the point's parameter d); heads: the stack's length (a
  "matrices" field; default 1).

Each draw comes from its own stream SeedSequence(seed, spawn_key=(..., LAW_KEY, crc32(name)
[, run])), so adding a random parameter leaves the other streams, and the point's runs, as
they were.
"""

from __future__ import annotations

import zlib

import numpy as np

from .errors import ScenarioError

LAWS = ("gaussian", "orthogonal", "identity")
DRAWS = ("point", "run", "common")
KEYS = ("law", "scale", "draw", "size", "heads")
LAW_KEY = 0x1A3


def parse(key: str, raw: dict, kind: str) -> dict:
    """The checked law table `raw` of the field `key` of `kind` ("matrix", "matrices" or
    "vector"); one line naming the key otherwise."""
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ScenarioError(key, f"unknown key {unknown[0]!r} of a law (known: {', '.join(KEYS)})")
    law = raw.get("law")
    if law not in LAWS:
        raise ScenarioError(key, f"law must be one of {', '.join(LAWS)}; got {law!r}")
    if kind == "vector" and law != "gaussian":
        raise ScenarioError(key, f"a vector's law is gaussian; got {law!r}")
    scale = raw.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not np.isfinite(scale):
        raise ScenarioError(key, f"scale must be a finite number, got {scale!r}")
    draw = raw.get("draw", "point")
    if draw not in DRAWS:
        raise ScenarioError(key, f"draw must be one of {', '.join(DRAWS)}; got {draw!r}")
    out = {"law": law, "scale": float(scale), "draw": draw}
    for name, lo in (("size", 1), ("heads", 1)):
        if name in raw:
            value = raw[name]
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= 4096:
                raise ScenarioError(key, f"{name} must be an integer in [{lo}, 4096], got {value!r}")
            out[name] = value
    if "heads" in out and kind != "matrices":
        raise ScenarioError(key, "heads is for a stack of matrices")
    return out


def is_law(value) -> bool:
    return isinstance(value, dict) and "law" in value


def draw(name: str, law: dict, kind: str, size: int, seed: int, stream: int, run: int | None = None) -> np.ndarray:
    """The array of the parameter `name` drawn by `law` (matrix (size, size), stack
    (heads, size, size) or vector (size,)); `stream`: the point's stream (ignored for draw
    "common"); `run`: the run, for draw "run"."""
    size = law.get("size", size)
    tag = zlib.crc32(name.encode())
    key = (LAW_KEY, tag) if law["draw"] == "common" else (stream, LAW_KEY, tag)
    if law["draw"] == "run":
        key += (int(run),)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))
    scale = law["scale"]
    if kind == "vector":
        return scale * rng.standard_normal(size)
    heads = law.get("heads", 1)
    out = np.empty((heads, size, size))
    for h in range(heads):
        if law["law"] == "identity":
            out[h] = scale * np.eye(size)
        elif law["law"] == "gaussian":
            out[h] = scale / np.sqrt(size) * rng.standard_normal((size, size))
        else:
            q, r = np.linalg.qr(rng.standard_normal((size, size)))
            out[h] = scale * q * np.where(np.diag(r) < 0, -1.0, 1.0)
    return out if kind == "matrices" else out[0]
