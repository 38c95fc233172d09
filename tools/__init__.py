"""Maintainers' tools, run from a checkout (not installed with dyn): `python -m tools.layers`."""
