"""ament_python package: `colcon build` on a robot, `pip install -e .` in the project's .venv."""
import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "lowrl_ros"


def tree(top: str) -> list[tuple[str, list[str]]]:
    """data_files entries for every file under ``top``, keeping the sub-directories."""
    return [(f"share/{PACKAGE}/{d}", [os.path.join(d, f) for f in files])
            for d, _, files in sorted(os.walk(top)) if files]


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml", "plugin.xml"]),  # plugin.xml: the rqt plugin (lowrl_ros/rqt/)
        (f"share/{PACKAGE}/launch", glob("launch/*.yaml")),
        *tree("config"),
        *tree("models"),
    ],
    install_requires=["setuptools", "numpy", "pyyaml", "psutil", "onnxruntime", "onnx"],
    extras_require={"train": ["torch", "gymnasium[mujoco]"], "sb3": ["stable-baselines3"]},
    zip_safe=True,
    maintainer="lowrl_ros team",
    maintainer_email="lowrl@example.com",
    description="Compressed RL policies on a robot's small computer, under an enforced budget.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "lowrl = lowrl_ros.cli:main",
            "policy_node = lowrl_ros.ros.policy_node:main",
            "sim_robot_node = lowrl_ros.ros.sim_robot_node:main",
            "budget_monitor_node = lowrl_ros.ros.budget_monitor_node:main",
            "finetune_node = lowrl_ros.ros.finetune_node:main",
            "trainer_node = lowrl_ros.ros.trainer_node:main",
            "monitor_node = lowrl_ros.ros.monitor_node:main",
        ],
    },
)
