"""The common random networks of a ResNet sweep (physics.md §3).

Network `r` of `ensemble.runs` (its weight function theta(s), inputs and targets) is drawn from
`SeedSequence(seed, spawn_key=(NETWORK_KEY, r))`: the same at every sweep point, so curves
against depth compare the same networks (dyn.resnet.params.network keeps them in the engine's
cache, so every depth and scheme of a sweep reuses them).
"""

from __future__ import annotations

import numpy as np

from ..core.sweep import common_rng
from .weights import WeightFunction, smooth_weights

NETWORK_KEY = 0x7E5  # spawn-key salt of the common random networks (any constant)


def network(
    seed: int, r: int, d: int, width: int, inputs: int, modes: int, scale: float
) -> tuple[WeightFunction, np.ndarray, np.ndarray]:
    """(weight function, inputs (inputs, d), targets (inputs, d)) of common network r."""
    rng = common_rng(seed, NETWORK_KEY, r)
    wf = smooth_weights(rng, d, width, modes, scale)
    return wf, rng.standard_normal((inputs, d)), rng.standard_normal((inputs, d))
