#!/usr/bin/env python3
"""median_step.py LOG WARMUP: the median step time (ms) of a training log
after its first WARMUP steps, from the progress lines fsdp-train prints
with -log_every 1 ("step i/N | ... | X ms") and the PyTorch comparators
print alike ("step i/N | loss | X ms"); "nan" when there are none.  Used by
run_bench.sh and commthreads.sh."""
import re
import statistics
import sys

STEP = re.compile(r"step (\d+)/\d+ \|.*\| ([0-9.]+) ms")


def median_step(path, warmup):
    ms = [float(m.group(2)) for m in (STEP.match(line) for line in open(path))
          if m and int(m.group(1)) > warmup]
    return statistics.median(ms) if ms else float("nan")


if __name__ == "__main__":
    print("%.1f" % median_step(sys.argv[1], int(sys.argv[2])))
