"""Each node's mean CPU (% of one core) from 30 to 75 s of every session run.sh made (process_cpu.csv)."""
import csv
import glob
import os
import statistics

for d in sorted(glob.glob("/tmp/abft/*/")):
    rows = list(csv.DictReader(open(os.path.join(d, "process_cpu.csv"))))
    t0 = float(rows[0]["time_s"])
    by: dict[str, list[float]] = {}
    for r in rows:
        if 30 <= float(r["time_s"]) - t0 <= 75:
            by.setdefault(r["process"], []).append(float(r["cpu_pct"]))
    print(os.path.basename(d.rstrip("/")), {k: round(statistics.mean(v), 1) for k, v in sorted(by.items())})
