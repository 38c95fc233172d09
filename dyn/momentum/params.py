"""Checks the Momentum ResNet sweeps share (systems momentum_limit and momentum_linear)."""
from __future__ import annotations

from ..core.errors import ScenarioError


def check_second_order_gamma(spec) -> None:
    """gamma = 1 - h/eps with h = T/depth must be positive (else the network is not invertible)."""
    h = spec.horizon / spec["depth"]
    if h >= spec["eps"]:
        raise ScenarioError("params.depth", f"gamma = 1 - h/eps must be > 0: depth "
                            f"{spec['depth']} with eps = {spec['eps']} gives h = {h:.3g} >= eps")
