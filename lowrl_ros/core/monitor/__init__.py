"""What a person watching a robot sees, ROS-free: the monitor model the rqt plugin and ``lowrl top`` share."""
