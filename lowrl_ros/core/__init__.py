"""ROS-free core: numpy at every public boundary. Never imports rclpy, ROS messages, or the layers
above it (lowrl_ros.ros, lowrl_ros.commands, lowrl_ros.bench).

Each sub-package is named by its role and states its side once, in its own ``__init__``:

| sub-package | side | may import from the project | heavy third-party |
|---|---|---|---|
| runtime  | robot, no torch      | nothing above it            | numpy, onnx, onnxruntime |
| budget   | robot, no torch      | runtime                     | psutil |
| stream   | both sides, no torch | runtime                     | (stdlib hmac/zlib) |
| train    | off-board            | runtime                     | torch, gymnasium |
| sim      | off-board and tests  | runtime                     | gymnasium, mujoco, matplotlib |
| finetune | robot process or off-board | runtime, train | torch only in kit, learner, session, offboard |
| compress | off-board            | runtime, train, sim         | torch (teacher, sb3, distill), stable_baselines3 |

test/test_import_rules.py enforces this table; docs/architecture.md explains it.
"""
