"""fusedbench benchmarks: baselines, timing, reports and comparisons.

``invoke bench`` runs :func:`bench.run.run_bench`; ``invoke compare`` runs
:func:`bench.compare.compare_files`. This package reaches the implementations
only through ``ops`` (data flows ops -> bench, never back).
"""
