"""What a run measures: its options, the named shape grids, the workloads and baselines, the jobs in order."""
