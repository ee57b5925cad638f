"""ROBOT process (the fine-tuner, at low priority) or OFF-BOARD (the trainer node): one fine-tuning loop.
torch only in kit, learner, session and offboard; transition_log (what the robot's recorder uses), versions
(the rollback and episode rules), wire (the /lowrl/transitions rows), status (learn gate, diagnostics) and
config (FineTuneConfig) are torch-free (docs/architecture.md)."""
