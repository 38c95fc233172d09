"""The contract the engine, the systems and the models all import, and that imports none of them.

contract     what the engine and the systems exchange (Output, Coord, Chunk, PointResult, roles)
spec         what a system receives: the frozen Setup and RunSpec, never the scenario document
sweep        sweep points and each point's random stream
schema       declared fields (Field) and their checks
layout       flat parameter vectors (Layout) and the numba block accessor
dynamics     a model's vector field as one record (Dynamics) and the model registry
errors, lazy, stats
"""
