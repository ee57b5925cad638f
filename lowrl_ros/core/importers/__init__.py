"""OFF-BOARD: bring your own policy. Importers of SB3, rsl_rl, TorchScript, plain ONNX and Isaac Lab
runs into lowrl artifacts, dispatched by registry.py (`lowrl import`). registry, contract, onnx and
isaaclab stay torch-free; sb3, rsl_rl and torchscript import torch only when they run (docs/import.md)."""
