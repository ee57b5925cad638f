"""Off-board trainer: SAC and TD3, dense or RLx2 dynamic sparse, fast on a small CPU.

Imports torch and gymnasium; never imported by the on-robot runtime. Entry point:
``Trainer(TrainConfig(...), run_dir).run()`` (see loop.py), or `lowrl train`.
"""
