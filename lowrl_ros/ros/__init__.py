"""Thin rclpy nodes: parameters, message <-> numpy conversion, topics and timers. One node per file."""
