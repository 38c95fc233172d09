"""Running sweeps: a scenario file in, one HDF5 file out.

runner       `dyn.run`: validate, open or create the output file, compute pending points, write
scenario     TOML -> a validated Scenario -> a RunSpec per point
executors, batched    run points (serial, process pool, dask; whole batches on JAX)
ensemble, reductions, averaging, stationarity, stepcheck    a point's runs -> its numbers
store, trajectories, disk, provenance    the single writer and what it writes
"""
