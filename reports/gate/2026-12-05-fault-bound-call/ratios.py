"""Each build's time over the first's, per round (the processes of one round ran back to back): the
geometric mean of the per-round ratios and its 95 % t interval.

    python ratios.py results.txt REFERENCE OTHER...
"""

import math
import re
import statistics
import sys

from scipy import stats

path, names = sys.argv[1], sys.argv[2:]
rounds, current = [], {}
for line in open(path):
    current[line.split()[0]] = float(re.findall(r"([\d.]+)us", line)[0])
    if len(current) == len(names):
        rounds.append(current)
        current = {}
for name in names[1:]:
    logs = [math.log(r[name] / r[names[0]]) for r in rounds]
    mean, half = (
        statistics.mean(logs),
        stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)),
    )
    print(
        f"{name}/{names[0]}: {math.exp(mean):.3f} [{math.exp(mean - half):.3f}, {math.exp(mean + half):.3f}] "
        f"in {len(logs)} rounds"
    )
