"""OFF-BOARD: distillation, int8 quantization, release gates and C export. torch only in teacher and
distill; quantize and release stay torch-free (docs/architecture.md). Importers of other frameworks'
policies live in core/importers."""
