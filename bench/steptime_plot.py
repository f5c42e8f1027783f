#!/usr/bin/python3
"""Predicted against measured step time, from steptime_validate.sh's rows.csv.

    /usr/bin/python3 bench/steptime_plot.py OUT.png DIR1/rows.csv [DIR2/rows.csv ...]

One colour per setting (the csv's mode column; "10gbit/1": PER_NODE=1), the tuner's pick circled,
the diagonal and the +-20% band drawn.  Needs Debian's python3-matplotlib.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

out, paths = sys.argv[1], sys.argv[2:]
rows = []
for p in paths:
    with open(p) as f:
        rows += list(csv.DictReader(f))
fig, ax = plt.subplots(figsize=(5.2, 4.4), dpi=90)
labels = {"node": "one node, W 2", "1gbit": "2 nodes x 2, 1 Gbit/s", "10gbit": "2 nodes x 2, 10 Gbit/s",
          "1gbit/1": "2 nodes x 1, 1 Gbit/s", "10gbit/1": "2 nodes x 1, 10 Gbit/s"}
lo, hi = 1e9, 0
for mode, colour in (("node", "tab:blue"), ("10gbit", "tab:green"), ("1gbit", "tab:red"),
                     ("10gbit/1", "tab:olive"), ("1gbit/1", "tab:purple")):
    pts = [r for r in rows if r["mode"] == mode]
    if not pts:
        continue
    m = [float(r["measured_ms"]) for r in pts]
    p = [float(r["predicted_ms"]) for r in pts]
    ax.scatter(m, p, s=18, color=colour, label=labels.get(mode, mode))
    for r in pts:
        if r["tuner"] == "1":
            ax.scatter([float(r["measured_ms"])], [float(r["predicted_ms"])], s=90,
                       facecolors="none", edgecolors=colour)
    lo, hi = min(lo, min(m + p)), max(hi, max(m + p))
lo, hi = lo * 0.8, hi * 1.2
xs = [lo, hi]
ax.plot(xs, xs, color="black", lw=0.8)
ax.fill_between(xs, [x * 0.8 for x in xs], [x * 1.2 for x in xs], color="grey", alpha=0.15,
                label="within 20%")
ax.set_xscale("log")
ax.set_yscale("log")
fmt = matplotlib.ticker.FuncFormatter(lambda v, _: "%g" % v)
for axis in (ax.xaxis, ax.yaxis):
    axis.set_major_formatter(fmt)
    axis.set_minor_formatter(fmt)
    axis.set_tick_params(which="minor", labelsize=6)
ax.set_xlim(lo, hi)
ax.set_ylim(lo, hi)
ax.set_xlabel("measured step time, ms (median)")
ax.set_ylabel("predicted step time, ms (fsdp-plan -profile)")
ax.set_title("fsdp-plan against fsdp-train (circled: -tune's pick)", fontsize=9)
ax.legend(fontsize=7, loc="upper left")
fig.tight_layout()
fig.savefig(out)
