"""BOTH sides, no torch: the signed, chunked bundle wire protocol, its sender (off-board) and its
receiver (robot). Imports runtime only (docs/architecture.md)."""
