"""OFF-BOARD: distillation, int8 quantization, release gates, C export and the Stable-Baselines3
importer. torch only in teacher, sb3 and distill; quantize and release stay torch-free
(docs/architecture.md)."""
