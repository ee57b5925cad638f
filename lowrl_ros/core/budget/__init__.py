"""ROBOT side, no torch: the budget monitor (latency, memory, thermal), its probes, and `lowrl profile`.
Imports runtime and psutil only (docs/architecture.md)."""
