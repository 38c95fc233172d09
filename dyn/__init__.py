"""dyn: continuous-time limits of deep Transformers and ResNets, swept from scenario files.

    dyn.run("attention_clusters")                    # a shipped scenario (or a TOML path) -> the HDF5 file
    ds = dyn.open("outputs/attention_clusters.h5")   # -> xarray.Dataset
    dyn.compare("outputs/attention_depth_limit.h5", along="form", reference="flow")
    print(dyn.describe("attention_sphere"))          # parameters, outputs, methods, scenarios

The models live in subpackages (`dyn.attention`, ...) and are callable directly on arrays.
The layers: `dyn.core` (the contract everything imports), `dyn.systems` (what a sweep runs),
`dyn.engine` (running sweeps), `dyn.presentation` (the command line, plots, summaries).
Attributes are imported on first use, so `import dyn` (and every spawned worker) stays light.
"""

from importlib import import_module

__version__ = "0.1.0"
__all__ = [
    "open",
    "run",
    "load",
    "compare",
    "describe",
    "Scenario",
    "ScenarioError",
    "System",
    "Model",
    "particles",
    "attention_particles",
    "Field",
    "Output",
    "Chunk",
    "Coord",
    "Draw",
    "Reference",
    "Geometry",
    "gradient_flow",
    "row_weights",
]

_LAZY = {
    "open": ".presentation.analysis",
    "run": ".engine.runner",
    "load": ".engine.scenario",
    "Scenario": ".engine.scenario",
    "ScenarioError": ".core.errors",
    "compare": ".presentation.comparison",
    "describe": ".presentation.describe",
    # writing your own system (docs/your_own_system.md)
    "System": ".core.system",
    "Field": ".core.schema",
    "Output": ".core.contract",
    "Chunk": ".core.contract",
    "Coord": ".core.contract",
    "Draw": ".core.contract",
    "Reference": ".core.contract",
    "Model": ".user.model",
    "particles": ".user.particles",
    "attention_particles": ".user.attention",
    "Geometry": ".user.geometry",
    "gradient_flow": ".user.gradient_flow",
    "row_weights": ".user.normalize",
}
# the model packages and layers, reachable as dyn.noisy etc. after a plain `import dyn` (loaded
# on first use); dyn.stationarity is the module dyn.engine.stationarity
SUBPACKAGES = (
    "attention",
    "tokens_sde",
    "noisy",
    "sinkformer",
    "resnet",
    "momentum",
    "numerics",
    "core",
    "engine",
    "presentation",
    "systems",
)
_MODULES = {"stationarity": ".engine.stationarity"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    if name in SUBPACKAGES:
        return import_module(f".{name}", __name__)
    if name in _MODULES:
        return import_module(_MODULES[name], __name__)
    raise AttributeError(f"module 'dyn' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(SUBPACKAGES) | set(_MODULES))
