"""ROBOT process (the fine-tuner, at low priority) or OFF-BOARD (the trainer node): one fine-tuning loop.
torch only in kit, learner, session and offboard; transition_log (what the robot's recorder uses), versions
(the rollback and episode rules), wire (the /lowrl/transitions rows) and status (learn gate, diagnostics)
are torch-free (docs/architecture.md)."""
