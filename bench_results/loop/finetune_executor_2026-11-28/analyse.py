import csv, glob, os, sys, statistics as st
for d in sorted(glob.glob('/tmp/abft/*/')):
    f = os.path.join(d, 'process_cpu.csv')
    if not os.path.exists(f): print(d, 'no csv'); continue
    rows = list(csv.DictReader(open(f)))
    if not rows: print(d, 'empty'); continue
    keys = rows[0].keys()
    print(d, list(keys)[:8]) if d.endswith('old1/') else None
    by = {}
    t0 = float(rows[0]['time_s'])
    for r in rows:
        t = float(r['time_s']) - t0
        if 30 <= t <= 75:
            by.setdefault(r.get('process') or r.get('name'), []).append(float(r.get('cpu_pct') or r.get('cpu')))
    print(os.path.basename(d.rstrip('/')), {k: round(st.mean(v), 1) for k, v in sorted(by.items())})
