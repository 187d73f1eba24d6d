"""fusedbench benchmarks: baselines, timing, reports and comparisons.

``invoke bench`` runs :func:`bench.run.main`, ``invoke bench.compare``
:func:`bench.compare.main` and ``invoke bench.serve`` :func:`bench.serve.run.main`.
This package reaches the implementations only through ``ops`` (data flows
ops -> bench, never back).
"""
