"""The rqt plugin "lowrl monitor" (plugin.py) and its widget (widget.py), also runnable without rqt:
``python -m lowrl_ros.rqt`` (docs/monitoring.md)."""
