"""The comparison statistics: pooling process units, intervals, verdicts."""
