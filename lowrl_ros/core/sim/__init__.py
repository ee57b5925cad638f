"""OFF-BOARD and tests: the simulated robot with a reality gap, policy evaluation, and session reports.
Imports runtime, gymnasium, mujoco and matplotlib (docs/architecture.md)."""
