"""Systems written outside the package: found by import path or entry point (:mod:`.locate`),
models written as one vector field (:mod:`.model`), interacting particles from one interaction
(:mod:`.particles`). The public names are re-exported by :mod:`dyn` (dyn.Model, dyn.particles)."""
