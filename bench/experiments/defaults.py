"""The experiments' command-line defaults, read by their parsers and by tasks.py (so each is written once).

Import-light on purpose: tasks.py reads it when invoke lists the tasks.
"""

AB_MEASURE = {
    "aa": 5,
    "slowdowns": "10,20",
    "runs": 5,
    "threshold": 0.03,
}  # threshold: the gate's (bench.stats.verdicts)
AB_SPREAD = {"rounds": 4}
OFFSET_SWEEP = {"dtype": "float32", "threads": 1, "reps": 31}
THREAD_SWEEP = {"threads": "1,2", "reps": 21}
