"""ROBOT side, no torch: the policy artifact format, inference engines, bundles, compute tiers and the
control step. Imports numpy, onnx and onnxruntime only (docs/architecture.md)."""
