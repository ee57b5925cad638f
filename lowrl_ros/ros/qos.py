"""Quality-of-service profiles shared by the nodes (one place, so publishers and subscribers match)."""
from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

# Latched: a late joiner (a restarted policy node) gets the last message at once.
# Used for /lowrl/compute_tier and /lowrl/policy_bundle.
LATCHED = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

# Control path: keep only the newest sample; a stale observation is worse than a dropped one.
CONTROL = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

# Statistics for rqt_plot and the budget monitor.
STATS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)

# A reply such as the bundle status (/lowrl/policy_bundle/status): reliable, volatile, a few kept.
STATUS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE,
                    durability=DurabilityPolicy.VOLATILE)

# A recorder must not drop what a controller may: the control topics are KEEP_LAST 1 for the policy
# node (a stale observation is worse than none), but a recorder (the fine-tuner) counts every message,
# so it keeps 2 s at 100 Hz while its learner holds the GIL (compatible with the publishers' QoS:
# depth is local).
RECORD = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=200, reliability=ReliabilityPolicy.RELIABLE,
                    durability=DurabilityPolicy.VOLATILE)
