"""fusedbench benchmarks, grouped by the stage of a measurement (floors, each importing only those below):

- ``measure``: how one variant is timed (clocks, pinning, placement, allocator, turns, the machine);
- ``plan``: what a run measures (options, grids, workloads, baselines, limits, the jobs);
- ``report``: the report's schema, metrics, targets, summary and plot;
- ``stats``: the comparison statistics (pooling, intervals, verdicts);
- ``rounds``: time the planned jobs round by round, then record them;
- ``processes``: one build's benchmark in a fresh worker process;
- ``ab``: two builds measured in one run;
- ``run`` (``invoke bench``), ``serve`` (``invoke bench.serve``), ``gpu_check`` (``invoke gpu-check``): the drivers;
- ``experiments``: measurements run once to decide a design; nothing else imports it.

This package reaches the implementations only through ``ops`` (data flows ops -> bench, never back).
"""
