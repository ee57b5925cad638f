"""The two-sample objective tried against robot_sysid.objective (README.md, section 3): per episode, channel and
statistic, the mean and the spread over the windows compared, instead of window k against window k (which rewards
the candidate whose windows vary least once the replay no longer follows the recording).

``asked()``: NEWOBJ=1 in the environment puts it in place of the package's, for this process only: the
identification's spawned replay workers import the package afresh, so a run with it must use one worker."""
import os

import numpy as np

from lowrl_ros.core.sim import robot_sysid


def objective(recorded, simulated, scale, noise, window, horizon):
    terms = []
    for c, rec in recorded.items():
        sim = simulated[c]
        cols = ~np.isnan(rec).all(axis=0)
        rec, sim, s, nz = rec[:, cols], sim[:, cols], scale[c][cols], np.asarray(noise[c])[cols]
        if c == "q":
            sim = sim + np.mean(rec - sim, axis=0)
        a = robot_sysid._window_stats(sim, window, nz)
        b = robot_sysid._window_stats(rec, window)
        if len(a):
            d = (a.mean(axis=0) - b.mean(axis=0)) ** 2 + (a.std(axis=0) - b.std(axis=0)) ** 2
            terms.append(np.mean(d / s ** 2))
        if horizon and c == "q":
            h = min(horizon, len(rec))
            terms.append(float(np.mean(((sim[:h] - rec[:h]) ** 2 - nz ** 2) / s ** 2)))
    return float(np.mean(terms)) if terms else 0.0


def asked() -> bool:
    """NEWOBJ=1: this objective replaces robot_sysid.objective in this process (use workers=1)."""
    if os.environ.get("NEWOBJ"):
        robot_sysid.objective = objective
        return True
    return False
