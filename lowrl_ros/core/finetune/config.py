"""FineTuneConfig: how the robot fine-tunes (no torch; the fine-tuner node, the trainer node's
``finetune.<name>`` parameters and `lowrl bench sim2real` all read it); FineTuneNodeSettings: the rest of
finetune_node's parameters (its topics, kit and work directory)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from lowrl_ros.core.config import coerce, field, require

# docs/finetune_reference.md, "Learners" (finetune_node's own `learner` parameter is robot | offboard): kit = the
# kit's own SAC/TD3 (the default until `lowrl bench sim2real --methods` says otherwise); crossq = CrossQ, UTD 1;
# rlpd = the kit's sim replay in half of each batch, LayerNorm critics, rlpd_updates_per_transition updates per
# transition; residual = the base artifact frozen, a bounded correction learned on top (core/finetune/residual.py).
ALGORITHMS = ("kit", "sac", "td3", "crossq", "rlpd", "residual")
RESIDUAL_CRITICS = ("fresh", "kit")


@dataclass(frozen=True)
class FineTuneConfig:
    """How the robot fine-tunes (finetune_node's parameters of the same names; trainer_node's ``finetune.<name>``)."""

    algorithm: str = field("kit", "fine-tuning algorithm: kit (the kit's own SAC or TD3), sac, td3 (must match "
                                "the kit), crossq (CrossQ: batch-renormalised critics, no targets), rlpd (the "
                                "kit's sim replay in half of every batch, LayerNorm critics, UTD > 1), residual "
                                "(the base artifact frozen, a small bounded correction learned on top: imported "
                                "policies)")
    # RLPD's README runs UTD 20 on a GPU. On this project's 2-core machine one SAC update (obs 48, action 12,
    # batch 128, 256x256, 1 thread) took ~18 ms of CPU (~54 updates per CPU-second, shared machine): UTD 2 at a
    # 20 Hz robot is ~40 updates/s, most of one niced core. Faster CPUs can raise it; a slower learner only falls
    # behind the cap (the status reports the updates/s achieved).
    rlpd_updates_per_transition: float = field(2.0, "update-to-data ratio of the rlpd learner (its "
                                                     "updates_per_transition)", range=(1e-3, 100.0))
    prior_size: int = field(50_000, "rlpd (and residual with residual_prior): at most this many transitions "
                                    "of the kit's prior data (prior.npz) held in memory, the newest; they count "
                                    "against memory_cap_mb", range=(0, 10_000_000))
    # 1e-3, measured in `lowrl bench sim2real` (docs/sim_to_real.md): as good as 1e-4 on Pendulum-v1 and far
    # better on InvertedPendulum-v5 (all 3 seeds to ~1000 on the gapped robot, against 29-43 % of the gap at 1e-4).
    lr: float = field(1e-3, "Adam learning rate of the fine-tuner", range=(1e-7, 1.0))
    batch_size: int = field(128, "minibatch size of each update", range=(1, 4096))
    buffer_size: int = field(50_000, "replay capacity (transitions in memory; the log on disk keeps "
                                     "everything)", range=(1, 10_000_000))
    min_transitions: int = field(400, "updates start once the buffer holds this many transitions",
                                 range=(1, 10_000_000))
    updates_per_transition: float = field(1.0, "at most this many updates per transition recorded "
                                               "(update-to-data cap)", range=(1e-3, 100.0))
    version_every_updates: int = field(1000, "updates between new policy versions", range=(1, 10_000_000))
    eval_episodes: int = field(3, "episodes a version runs before it is judged", range=(1, 1000))
    rollback_margin: float = field(150.0, "roll back when a version's mean return is this much below the "
                                          "best (return units)", range=(0.0, 1e9))
    # dynamic: a YAML or -p value may come as an int (-1500); NaN does not survive every YAML parser.
    min_return: float = field(math.nan, "safety floor: any episode below it trips a rollback (nan: off)",
                              dynamic=True)
    seed: int = field(0, "seed of replay sampling and of the networks' noise", range=(0, 2**31 - 1))
    threads: int = field(1, "torch threads of the learner (1 leaves the other core to control)",
                         range=(1, 64))
    memory_cap_mb: float = field(1500.0, "resident memory (MB) of the fine-tuner above which learning "
                                         "pauses", range=(64.0, 1e6))
    nice: int = field(10, "niceness added to the learner thread (0..19; higher = lower priority than "
                          "control)", range=(0, 19))
    updates_per_slice: int = field(8, "updates between checks of the tier, memory and events",
                                   range=(1, 10_000))
    # The critics learn the robot's dynamics before the actor follows them: a sim critic on a small, fresh
    # buffer otherwise drags the policy down first (the offline-to-online dip). Versions count from its end.
    critic_warmup_updates: int = field(0, "first updates that train the critics only (versions count "
                                          "from their end)", range=(0, 10_000_000))
    # TD3+BC: the Q term divided by its mean |Q|, plus bc_weight x the squared distance to the recorded action;
    # keeps the actor near what the robot did, where the critic has data.
    bc_weight: float = field(0.0, "weight of a behaviour-cloning term in the actor loss (TD3+BC; 0: off)",
                             range=(0.0, 1e6))
    # The residual learner (core/finetune/residual.py, docs/finetune_reference.md "Learners"). Defaults: the
    # benchmark gaps (actuator gain -20 %, an encoder offset) need corrections of a fifth of the range to be won
    # back, so 0.2 (the reference's 0.05-0.1 would cap the recoverable share below the target; a version
    # that the correction makes worse is judged and rolled back like any other).
    residual_scale: float = field(0.2, "residual: the correction's bound, a fraction of each action's half range "
                                       "(0 < scale <= 1)", range=(1e-6, 1.0))
    residual_hidden: int = field(64, "residual: width of the correction network's two hidden layers",
                                 range=(1, 4096))
    # Weight of mean((d / bound)^2) against the actor's Q term over its mean |Q| (TD3+BC's normalisation, so
    # the weight does not depend on the reward's scale). TD3+BC's 0.4 on the action's squared error is ~0.016
    # on this term at scale 0.2 (0.4 x 0.2^2): 0.01 anchors a little less than that, as online data allows.
    residual_anchor: float = field(0.01, "residual: weight of the anchor to the base, mean((correction / "
                                         "bound)^2), in the actor loss", range=(0.0, 1e6))
    # ~5k critic-only steps in the reference recipe on robot data alone; with the kit's simulator transitions in
    # half of each batch (residual_prior) 2000 leave 18 of 20 versions to a 20k-step session at UTD 1.
    residual_critic_updates: int = field(2000, "residual: first updates that train the fresh critics only, on "
                                               "the base's own rollouts (versions count from their end)",
                                         range=(0, 10_000_000))
    # Off by default, measured (bench_results/sim2real/HISTORY.md, "The residual learner"): the training
    # simulator's transitions in half of every batch teach the critic the simulator's Q, which is what the
    # correction has to move away from (imported PPO on the gapped pendulum: 0 % of the gap with them, 14 %
    # without, seed 0). The robot's own action variety comes from the policy node's explore_std instead.
    residual_prior: bool = field(False, "residual: seed the replay with the kit's simulator transitions (prior.npz, "
                                        "half of every batch, as rlpd)")
    # A fresh critic learns the robot's Q from nothing; the kit's critics (trained in the simulator around the
    # base) start from the sim's Q and only have to learn the difference.
    residual_critic: str = field("fresh", "residual: fresh (LayerNorm twin critics learned from the robot's data) "
                                          "| kit (the kit's critics, trained in the simulator, fine-tuned)")
    # See the module docstring: the baseline is the frozen kit critic's value of each episode's start state.
    judge_baseline: bool = field(True, "judge versions by their mean return adjusted for each episode's "
                                       "start state (false: plain mean returns)")

    def __post_init__(self) -> None:
        need = functools.partial(require, owner="FineTuneConfig")

        need(self.algorithm in ALGORITHMS, f"algorithm={self.algorithm!r} is not one of {', '.join(ALGORITHMS)} "
                                       "(docs/finetune_reference.md, Learners)")
        need(self.rlpd_updates_per_transition > 0,
             f"rlpd_updates_per_transition={self.rlpd_updates_per_transition} must be > 0 (e.g. 2)")
        need(self.prior_size >= 0, f"prior_size={self.prior_size} must be >= 0 (0: no prior data)")
        need(math.isfinite(self.residual_scale) and 0 < self.residual_scale <= 1,
             f"residual_scale={self.residual_scale} must be in (0, 1] (a fraction of the half action range; e.g. 0.2)")
        need(self.residual_critic in RESIDUAL_CRITICS,
             f"residual_critic={self.residual_critic!r} is not one of {', '.join(RESIDUAL_CRITICS)}")
        need(math.isfinite(self.residual_anchor) and self.residual_anchor >= 0,
             f"residual_anchor={self.residual_anchor} must be >= 0 (0: the bound alone keeps it near the base)")
        need(self.residual_critic_updates >= 0,
             f"residual_critic_updates={self.residual_critic_updates} must be >= 0")
        need(self.lr > 0, f"lr={self.lr} must be > 0 (e.g. 1e-3)")
        for name in ("batch_size", "buffer_size", "min_transitions", "version_every_updates", "eval_episodes",
                     "threads", "updates_per_slice", "residual_hidden"):
            need(int(getattr(self, name)) >= 1, f"{name}={getattr(self, name)} must be >= 1")
        need(self.min_transitions <= self.buffer_size,
             f"min_transitions={self.min_transitions} exceeds buffer_size={self.buffer_size}; lower it")
        need(self.critic_warmup_updates >= 0, f"critic_warmup_updates={self.critic_warmup_updates} must be >= 0")
        need(math.isfinite(self.bc_weight) and self.bc_weight >= 0,
             f"bc_weight={self.bc_weight} must be >= 0 (0: off; e.g. 0.4, TD3+BC's 1/2.5)")
        need(self.updates_per_transition > 0, f"updates_per_transition={self.updates_per_transition} must be > 0")
        need(self.rollback_margin >= 0, f"rollback_margin={self.rollback_margin} must be >= 0 (return units)")
        need(self.seed >= 0, f"seed={self.seed} must be >= 0")
        need(self.memory_cap_mb >= 64, f"memory_cap_mb={self.memory_cap_mb} must be >= 64 (torch alone is ~230 MB)")
        need(0 <= self.nice <= 19, f"nice={self.nice} must be in 0..19 (10: below the control path)")


def finetune_items(items: list[str], flag: str, refused: dict[str, str] | None = None) -> dict[str, Any]:
    """``FIELD=VALUE`` command-line items as FineTuneConfig values, checked by FineTuneConfig itself.

    ``refused`` maps fields the command sets from flags of their own to that flag (named in the error).
    Raises ValueError naming the item, the field or the value at fault."""
    fields = FineTuneConfig.__dataclass_fields__
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise ValueError(f"{flag} {item!r}: use FIELD=VALUE with a FineTuneConfig field")
        if name in (refused or {}):
            raise ValueError(f"{flag} {name}: use {refused[name]}")
        if name not in fields:
            raise ValueError(f"{flag} {name}: FineTuneConfig has no such field")
        out[name] = coerce(fields[name], value, owner="FineTuneConfig")
    FineTuneConfig(**out)  # its own checks, before anything runs
    return out


# finetune_node's own parameters.
INPUTS = ("joint_states", "observation")
LEARNERS = ("robot", "offboard")
END_KINDS = ("truncated", "terminated")
EXECUTORS = ("auto", "single")


@dataclass(frozen=True)
class FineTuneNodeSettings:
    """finetune_node's own parameters (FineTuneConfig, TransitionLogConfig and the observation adapter bring
    the rest); all read-only except ``enabled``. Here, not in the node, so a config check needs no ROS."""

    kit_path: str = field("", "fine-tune kit directory (kit.json + agent.pt)")
    work_dir: str = field("~/.ros/lowrl_finetune", "transitions/, versions/, learner.pt go here")
    base_policy_path: str = field("", "the artifact the policy node starts with (first rollback target)")
    base_version: int = field(0, "its version (0: the kit contract's)", range=(0, 2**31 - 1))
    policy_node: str = field("policy_node", "node whose policy_path parameter receives new versions")
    enabled: bool = field(True, "learn (recording never stops); true again clears a safety pause", live=True)
    input: str = field("joint_states", "no robot_file: the policy node's observation source (" + " | ".join(INPUTS)
                       + "), with obs_fields it builds the robot file")
    joint_states_topic: str = field("joint_states", "sensor_msgs/JointState: the joint_effort reward's efforts")
    observation_topic: str = field("lowrl/observation", "no robot_file, input observation: the policy node's input")
    controller_name: str = field("forward_command_controller", "unused: the step rows carry the commands (kept so "
                                 "old parameter files load)")
    reward_topic: str = field("lowrl/reward", "std_msgs/Float64 reward, one per robot step")
    episode_info_topic: str = field("lowrl/episode", "Float64MultiArray [index, return, length, terminated] per "
                                                      "episode ('' to use episode_topic)")
    episode_topic: str = field("lowrl/episode_return",
                               "std_msgs/Float64 return per episode, read only when episode_info_topic is ''")
    episode_end_kind: str = field("truncated", "episode_topic only: what an end means: truncated (time limit) | "
                                               "terminated")
    diagnostics_period_s: float = field(1.0, "period of /diagnostics", range=(0.05, 60.0))
    learner: str = field("robot", "robot: learn here | offboard: stream transitions to trainer_node instead")
    transitions_topic: str = field("lowrl/transitions", "offboard: where transitions are streamed")
    robot_file: str = field("", "the policy node's robot YAML (its reward:/episode: sections are computed here); "
                                "empty: the one obs_fields/input describe")
    step_topic: str = field("lowrl/policy/step", "the policy node's step rows: what it saw and did each tick")
    reset_topic: str = field("lowrl/reset", "robot_file with episode:: std_msgs/Empty published at each episode end")
    ready_topic: str = field("", "robot_file with episode:: std_msgs/Bool true once the robot stands again after a "
                                 "reset (the policy node's ready_topic): the next episode starts there, rows before "
                                 "it are not recorded; empty: at the first row after the end")
    record_episodes: int = field(0, "robot_file with episode:: the first this many episodes end after "
                                    "record_time_limit_steps (the off-board identification's recording: trainer_node "
                                    "retrain.episodes); 0: every episode runs to the file's limits", range=(0, 10**6))
    record_time_limit_steps: int = field(250, "record_episodes: their time limit, in policy steps", range=(1, 10**9))
    demos_dir: str = field("", "a transition log directory of demonstrations seeding the demo buffer (HIL-SERL)")
    executor: str = field("auto", "auto: rclpy's EventsExecutor when the robot file computes the reward and the "
                                  "episode ends (7-8 % of a core against 19-21 % at 50 Hz), else single-threaded "
                                  "(pairing by the message info) | single: always single-threaded")

    def __post_init__(self) -> None:
        for name, allowed in (("input", INPUTS), ("episode_end_kind", END_KINDS), ("learner", LEARNERS),
                              ("executor", EXECUTORS)):
            require(getattr(self, name) in allowed,
                    f"{name} {getattr(self, name)!r} is unknown; use one of {', '.join(allowed)}")


@dataclass(frozen=True)
class TrainerNodeSettings:
    """The trainer node's own parameters (StreamConfig brings the stream's; ``finetune.<field>`` FineTuneConfig's)."""

    bundle_topic: str = field("lowrl/policy_bundle", "where bundles go; the robot answers on <topic>/status")
    diagnostics_period_s: float = field(1.0, "period of /diagnostics", range=(0.05, 60.0))
    finetune_kit: str = field("", "off-board fine-tuning: the kit of the robot's policy ('' = off)")
    finetune_work_dir: str = field("~/.ros/lowrl_offboard", "transitions received, learner.pt, versions/")
    base_policy_path: str = field("", "the artifact the robot starts with (first rollback target)")
    base_version: int = field(0, "its version (0: the kit contract's)", range=(0, 2**31 - 1))
    transitions_topic: str = field("lowrl/transitions", "the robot's transitions (finetune_node learner:=offboard)")
    offboard_method: str = field("finetune", "learning from the robot's transitions: finetune (needs finetune_kit) "
                                 "| sysid (the legged robot: identify its gap, fold the sensor biases into "
                                 "base_policy_path, release, judge; sysid.* parameters) | retrain (any robot_file "
                                 "with a sim: section: identify its gap, retrain base_policy_path with PPO in the "
                                 "identified simulator, release, judge; retrain.*, identify.*, ppo.* parameters)")
    robot_file: str = field("", "offboard_method retrain: the robot file (with a sim: section) the robot runs")
