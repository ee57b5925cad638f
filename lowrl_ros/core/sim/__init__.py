"""OFF-BOARD and tests: the simulated robot with a reality gap, policy evaluation, plots (plot.py: the
Agg pyplot). Imports runtime, gymnasium, mujoco and matplotlib (docs/architecture.md); the session directory
and its report live in core/session."""
