"""Which tests leave the default tier, and for which tier: one table (as Isaac Lab keeps its per-test
budgets in one file, tools/test_settings.py), applied by conftest.py as markers at collection.

- ``integration`` (``make test-integration``): process level: node processes, SIGKILL/resume, `lowrl launch`
  + SIGINT, colcon, the README pipeline and docs blocks as written, lockstep sessions, bench smokes that
  assert no speed, anything that trains or distils for more than a few seconds.
- ``realtime`` (``make test-realtime``): wall-clock and learning claims: the 150 s demo improvement, the load
  phase, CPU burners, legged sessions, learners over ROS, loop timing, training to a return. Each asserts with
  margins measured over several runs (the test says which), or on a lockstep clock.

Everything else is the default tier (``make test``): each test phase under ``LOWRL_TEST_LIMIT_S`` (10 s), the
whole tier under 5 minutes on 2 cores. An entry is a node id or its prefix (a module, ``module::test``).
"""
from __future__ import annotations

REALTIME = (
    "test/test_session.py::test_demo_session_fine_tuning_improves_the_return_on_the_gapped_robot",
    "test/test_session.py::test_demo_load_phase_steps_the_tier_down_and_back_and_pauses_the_fine_tuner",
    "test/test_budget_node.py::test_cpu_burners_escalate_the_policy_misses_stop_and_it_recovers_after_the_dwell",
    "test/test_finetune_learners_ros.py::",
    "test/test_launch.py::test_bench_loop_smoke",
    "test/test_launch.py::test_bench_loop_legged_smoke",
    "test/test_launch.py::test_lowrl_demo_runs_the_legged_session",
    "test/test_train_learning.py::",
    "test/test_policy_node_loop.py::test_the_ticks_lock_on_just_after_the_robots_joint_states",
    "test/test_bench_loop.py::test_floor_process_takes_the_topics_and_commands_at_50_hz_on_the_control_thread",
    "test/test_legged.py::test_legged_launch_in_process_walks_upright",
    "test/test_demo_load.py::test_burners_load_the_cpu_and_stop",
    "test/test_budget_ladder.py::test_every_arm_walks_and_the_ladder_never_decimates",
    "test/test_distill.py::test_deployed_int8_sparse_student_keeps_97_percent_of_the_teacher_return",
    # The fine-tuner's learner thread must make 40 updates on the wall clock before the version under test
    # exists (21 s and a failure once with the machine loaded; ~3-5 s idle).
    "test/test_finetune_node.py::test_versions_reach_the_policy_node_and_a_bad_one_is_rolled_back",
    "test/test_finetune_node.py::test_a_version_the_policy_node_rejects_trips_a_rollback",
)

INTEGRATION = (
    "test/test_launch.py::test_lowrl_demo_runs_the_quadruped",  # lowrl demo --robot quadruped, 8 s
    "test/test_monitor_session.py::",  # lowrl top in tmux and the rqt widget against a running demo
    "test/test_foxglove_session.py::",  # a Foxglove client and the MCAP recording of a running demo
    "test/test_documented_commands.py::test_readme_pipeline_runs_as_written",
    "test/test_documented_commands.py::test_docs_blocks_run_as_written",
    "test/test_documented_commands.py::test_eval_prints_one_line_per_episode",
    "test/test_launch.py::test_lowrl_launch_brings_up_the_robot_and_stops_it_on_sigint",
    "test/test_launch.py::test_launcher_exits_non_zero_when_a_node_dies",
    "test/test_launch.py::test_nodes_stop_when_their_launcher_is_killed",
    "test/test_launch.py::test_lowrl_demo_prints_figures_from_the_running_nodes",
    "test/test_finetune_node.py::test_killed_mid_session_keeps_every_transition_and_resumes",
    "test/test_finetune_node.py::test_bad_parameters_exit_with_the_fix",
    "test/test_colcon.py::",
    "test/test_trainer_node.py::test_refuses_to_start_without_a_key",
    "test/test_trainer_node.py::test_insecure_process_streams_unsigned_and_says_so_loudly",
    "test/test_budget_node.py::test_bad_config_at_start_is_a_clear_error",
    "test/test_budget_node.py::test_a_launcher_rename_gives_one_monitor_node_and_stats_remaps_apply",
    "test/test_budget_node.py::test_the_policy_node_started_and_restarted_applies_the_current_tier_at_once",
    "test/test_bundle_protocol_node.py::test_trainer_restarted_mid_stream",
    "test/test_session.py::",
    "test/test_compress_hints.py::",
    "test/test_compress_cli.py::test_compress_from_a_teacher_distils_then_gates",
    "test/test_compress_cli.py::test_compress_releases_a_bundle_whose_metadata_round_trips",
    "test/test_compress_cli.py::test_compress_stops_with_exit_1_and_writes_no_bundle_when_a_gate_fails",
    "test/test_bench_train.py::test_seeds_part_summarises_every_seed_file_of_one_setting",
    "test/test_bench_train.py::test_mujoco_part_reuses_runs_and_a_recorded_dense_score",
    "test/test_bench_train.py::test_mujoco_part_sparse_set_overrides_the_scaling_in_a_run_of_its_own",
    "test/test_bench_sim2real.py::test_legged_fine_tuning_runs_on_the_gapped_robot_with_the_shipped_artifact",
    "test/test_bench_sim2real.py::test_fine_tune_runs_the_asked_updates_per_robot_step",
    "test/test_bench_loop.py::test_a_killed_bench_leaves_no_busy_loop_behind",
    "test/test_markers.py::test_the_core_selection_imports_no_rclpy",
    "test/test_markers.py::test_an_unmarked_module_importing_rclpy_is_caught",
    "test/test_report_session.py::test_report_from_a_real_session_shows_terms_interventions_versions_tiers_latency",
    "test/test_demo_load.py::test_burners_exit_when_the_demo_is_killed",
    "test/test_sim2sim.py::test_sim2sim_shipped_legged_policy_is_in_parity",
    "test/test_sim2sim.py::test_sim2sim_with_two_joints_swapped_fails_naming_the_term",
    "test/test_robot_file_sim.py::test_sim2sim_quadruped_is_in_parity",
    "test/test_robot_file_sim.py::test_sim2sim_quadruped_with_two_joints_swapped_fails_naming_the_term",
    "test/test_retrain.py::test_local_and_ray_give_the_same_artifact_for_the_same_seed",  # Ray clusters: ~10 s each
    "test/test_retrain.py::test_a_dead_ray_worker_mid_rollout_is_a_clear_result",
    "test/test_offboard_retrain.py::test_identify_retrain_release_judge_and_resume_after_a_restart",  # ~20 s
)


def tier_of(nodeid: str) -> str | None:
    """"realtime", "integration" or None (the default tier) for a test's node id."""
    for tier, prefixes in (("realtime", REALTIME), ("integration", INTEGRATION)):
        if any(nodeid == p or nodeid.startswith(p if p.endswith("::") else p + "[") for p in prefixes):
            return tier
    return None
