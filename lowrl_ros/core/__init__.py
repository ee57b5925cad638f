"""ROS-free core: numpy at every public boundary.

Never imports rclpy or ROS messages. The on-robot runtime modules (artifact, engines, budget,
tiers) must not import torch either; training modules may.
"""
