"""ROBOT process (the fine-tuner, at low priority) or OFF-BOARD (the trainer node): one fine-tuning loop.
torch only in learner and offboard; transition_log is torch-free and is what the robot's recorder uses
(docs/architecture.md)."""
