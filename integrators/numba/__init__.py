"""The numba backend: fixed-step Runge-Kutta (:mod:`.fixed`), adaptive embedded pairs
(:mod:`.adaptive`), Euler-Maruyama (:mod:`.sde`, counter-based normals in :mod:`.sde_rng`), the
ABI of models (:mod:`.abi`, also ``integrators.numba_abi``), the kernels' ``njit`` (:mod:`.jit`,
also ``integrators.jit``) and numba's compile events (:mod:`.events`).
Importing a module here compiles nothing: kernels compile on first need."""
