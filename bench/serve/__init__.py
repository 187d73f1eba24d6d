"""``invoke serve-bench``: the exported model served to concurrent clients (throughput, tail latency, correctness)."""
