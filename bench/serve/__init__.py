"""``invoke bench.serve``: the exported model served to concurrent clients (throughput, tail latency, correctness)."""
