"""The jax backend: fixed-step schemes over a batch of points x runs in one jitted, vmapped
program (:mod:`.batch`). Importing it imports no JAX."""
