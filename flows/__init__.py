"""Prefect 3 flows that run evalcore on a Dask cluster (thin: they call the engine)."""
