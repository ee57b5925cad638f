"""lowrl_ros: compressed RL policies on a robot's own small computer, under an enforced budget."""

__version__ = "0.1.0"
