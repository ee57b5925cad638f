"""OFF-BOARD and tests (files.py also in the nodes that write a session): a sim-to-real session's directory
(files.py: what each node writes and how it is read), its numbers (analysis.py) and its report
(report.py: the markdown summary and the PNG; matplotlib only when drawing). Imports runtime, finetune
(the learner's state names, the episode log's file) and sim (the Agg pyplot) (docs/architecture.md)."""
