"""OFF-BOARD: SAC and TD3, dense or RLx2 dynamic sparse, fast on a small CPU, plus ActorQ's
distributed int8 actors. Imports runtime, torch and gymnasium; never imported by the on-robot runtime.
Entry point: ``Trainer(TrainConfig(...), run_dir).run()`` (trainer.py), or `lowrl train`."""
