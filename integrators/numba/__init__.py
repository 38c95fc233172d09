"""The numba backend: fixed-step Runge-Kutta (:mod:`.fixed`), adaptive embedded pairs
(:mod:`.adaptive`), Euler-Maruyama (:mod:`.sde`, counter-based normals in :mod:`.sde_rng`), the
ABI of models (:mod:`.abi`), the kernels' ``njit`` (:mod:`.jit`) and numba's compile events
(:mod:`.events`).
Importing a module here compiles nothing: kernels compile on first need."""
