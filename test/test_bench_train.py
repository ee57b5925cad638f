"""`lowrl bench train --part mujoco` at a tiny scale (real runs, reuse of finished runs, a recorded dense score),
and `--part seeds`, its summary across seeds."""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest

from lowrl_ros.bench import train as bench_train


def _args(tmp_path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_train.add_arguments(parser)
    # Pendulum-v1 has a SAC preset (config/train_pendulum_sac.yaml); 200 steps train in seconds.
    return parser.parse_args(["--part", "mujoco", "--envs", "Pendulum-v1", "--steps", "200",
                              "--runs-dir", str(tmp_path / "runs"), *extra])


def test_mujoco_part_reuses_runs_and_a_recorded_dense_score(tmp_path):
    results, markdown = bench_train._mujoco(_args(tmp_path, "--variants", "dense,rlx2"))
    dense, rlx2 = results["Pendulum-v1/dense"], results["Pendulum-v1/rlx2"]
    assert len(rlx2["evaluations"]) == 10 and len(rlx2["buffer_sizes"]) == 10
    assert not rlx2["reused_finished_run"] and "| Pendulum-v1 | dense |" in markdown
    recorded = tmp_path / "dense.json"
    recorded.write_text(json.dumps({"results": results}))

    # RLx2 alone against the recorded dense score: the finished RLx2 run is reused, dense is not retrained.
    again, markdown = bench_train._mujoco(_args(tmp_path, "--variants", "rlx2", "--dense-from", str(recorded)))
    assert again["Pendulum-v1/rlx2"]["reused_finished_run"]
    assert again["Pendulum-v1/rlx2"]["score"] == rlx2["score"]
    assert again["Pendulum-v1/dense"] == {"score": dense["score"], "recorded_in": str(recorded)}
    assert f"dense (recorded in {recorded})" in markdown
    assert rlx2["eval_steps"] == [20 * i for i in range(1, 11)]
    for res, png in ((results, "both.png"), (again, "recorded.png")):  # curves; a recorded score as a line
        out = bench_train.draw_mujoco(res, tmp_path / png)
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert not (tmp_path / "runs" / "Pendulum-v1-dense-200-s0").exists()

    # A recorded score of another seed or budget is refused, with what differs.
    with pytest.raises(SystemExit, match="seed 0; this run is 200 steps, seed 3"):
        bench_train._mujoco(_args(tmp_path, "--variants", "rlx2", "--seed", "3", "--dense-from", str(recorded)))
    assert not (tmp_path / "runs" / "Pendulum-v1-rlx2-200-s3").exists()  # refused before training
    with pytest.raises(SystemExit, match="no such file"):
        bench_train._mujoco(_args(tmp_path, "--variants", "rlx2", "--dense-from", str(tmp_path / "none.json")))
    # With dense trained too, a recorded score would be silently ignored: refused instead.
    with pytest.raises(SystemExit, match="dense is also in --variants dense,rlx2; drop one"):
        bench_train._mujoco(_args(tmp_path, "--variants", "dense,rlx2", "--dense-from", str(recorded)))


def test_mujoco_part_sparse_set_overrides_the_scaling_in_a_run_of_its_own(tmp_path):
    results, _ = bench_train._mujoco(_args(tmp_path, "--variants", "rlx2", "--sparse-set", "nstep_delay=50",
                                           "mask_interval=40"))
    run_dir = Path(results["Pendulum-v1/rlx2"]["run_dir"])
    assert run_dir.name == "Pendulum-v1-rlx2-200-mask_interval40-nstep_delay50"
    config = json.loads((run_dir / "run.json").read_text())["config"]
    assert (config["nstep_delay"], config["mask_interval"]) == (50, 40)  # the bench's own ΔT is 100 here
    with pytest.raises(SystemExit, match="--sparse-set 'nstep_delay': use FIELD=VALUE"):
        bench_train._mujoco(_args(tmp_path, "--variants", "rlx2", "--sparse-set", "nstep_delay"))
    with pytest.raises(SystemExit, match="unknown field"):
        bench_train._mujoco(_args(tmp_path, "--variants", "dense,rlx2", "--sparse-set", "n_step=3"))
    assert not (tmp_path / "runs" / "Pendulum-v1-dense-200").exists()  # refused before dense trained
    # Without the flag the preset's (the paper's) delay stands, whatever the budget.
    results, _ = bench_train._mujoco(_args(tmp_path, "--variants", "rlx2"))
    summary = json.loads((tmp_path / "runs" / "Pendulum-v1-rlx2-200" / "run.json").read_text())
    assert summary["config"]["nstep_delay"] == 1000


def test_result_paths_carry_setting_env_and_seed_zero_included(tmp_path):
    from lowrl_ros.bench import record

    def paths(*extra, part="mujoco"):
        places = bench_train._result_places(part, _args(tmp_path, *extra))
        return {env: record.result_path(root=tmp_path, **where).relative_to(tmp_path).as_posix()
                for env, where in places.items()}

    assert paths() == {"Pendulum-v1": "train/mujoco/sac_preset/Pendulum-v1/seed0"}  # seed 0 has its suffix too
    assert paths("--algo", "td3", "--actor-sparsity", "0.9", "--critic-sparsity", "0.85", "--seed", "2",
                 "--envs", "HalfCheetah-v5,Hopper-v5") == {
        "HalfCheetah-v5": "train/mujoco/td3_a0.9_c0.85/HalfCheetah-v5/seed2",  # one file per environment:
        "Hopper-v5": "train/mujoco/td3_a0.9_c0.85/Hopper-v5/seed2"}            # a one-env run cannot overwrite both
    # a --sparse-set run does not overwrite the preset's result of the same seed
    assert paths("--algo", "td3", "--sparse-set", "sparse_init=scaled", "nstep_delay=9", "--seed", "3") == \
        {"Pendulum-v1": "train/mujoco/td3_nstep_delay9_sparse_initscaled/Pendulum-v1/seed3"}
    assert paths("--algo", "td3", part="seeds") == {"Pendulum-v1": "train/mujoco/td3_preset/Pendulum-v1/summary"}
    assert paths("--algo", "td3", part="speed") == {None: "train/speed/preset/result"}
    assert paths("--threads", "2", part="speed") == {None: "train/speed/threads2/result"}
    assert paths(part="kernels") == {None: "train/kernels/result"}


def test_a_result_of_another_command_is_refused_before_training(tmp_path, monkeypatch):
    from lowrl_ros.bench import record

    monkeypatch.setattr(record, "RESULTS_DIR", tmp_path / "results")
    seed0 = tmp_path / "results" / "train/mujoco/sac_preset/Pendulum-v1/seed0.json"
    seed0.parent.mkdir(parents=True)
    seed0.write_text(json.dumps({"command": "lowrl bench train --part mujoco --steps 300000", "results": {}}))
    with pytest.raises(SystemExit, match="recorded: lowrl bench train --part mujoco --steps 300000"):
        bench_train.run(_args(tmp_path, "--variants", "rlx2"))
    assert not (tmp_path / "runs").exists()  # nothing trained


def test_seeds_part_summarises_every_seed_file_of_one_setting(tmp_path, monkeypatch):
    from lowrl_ros.bench import record

    monkeypatch.setattr(record, "RESULTS_DIR", tmp_path / "results")
    with pytest.raises(SystemExit, match=r"no .*train/mujoco/sac_preset/<env>/seed<N>\.json for --envs Pendulum-v1; "
                                         "run --part mujoco"):
        bench_train._seeds(_args(tmp_path))
    for seed in ("0", "1"):  # real tiny runs, written where --part mujoco writes them
        assert bench_train.run(_args(tmp_path, "--variants", "dense,rlx2", "--seed", seed)) == 0
    env_dir = tmp_path / "results" / "train/mujoco/sac_preset/Pendulum-v1"
    one = json.loads((env_dir / "seed1.json").read_text())
    del one["results"]["Pendulum-v1/dense"]  # a seed whose dense has not been trained yet is skipped, and said so
    one["results"]["seed"] = 2
    (env_dir / "seed2.json").write_text(json.dumps(one))
    other = tmp_path / "results" / "train/mujoco/sac_a0.5/Pendulum-v1/seed3.json"  # another setting: not read
    other.parent.mkdir(parents=True)
    other.write_text(json.dumps(one))

    # parts mujoco (from _args: seed 0's finished runs are reused) then seeds
    assert bench_train.run(_args(tmp_path, "--part", "seeds")) == 0
    summary = json.loads((env_dir / "summary.json").read_text())
    out = summary["results"]
    e = out["Pendulum-v1/rlx2"]
    scores = {s: json.loads((env_dir / f"seed{s}.json").read_text())["results"] for s in (0, 1)}
    assert e["seeds"] == [0, 1]
    assert e["dense"] == [scores[s]["Pendulum-v1/dense"]["score"] for s in (0, 1)]
    assert e["sparse"] == [scores[s]["Pendulum-v1/rlx2"]["score"] for s in (0, 1)]
    assert e["verdict"] == "no ratio: the dense mean is <= 0"  # Pendulum's returns are negative
    assert out["skipped"] == ["seed2.json (Pendulum-v1, rlx2): no dense score "
                              "(train dense, then --variants dense,VARIANT)"]
    assert (env_dir / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert (env_dir / "seed0.png").read_bytes()[:4] == b"\x89PNG"
    assert (summary["setting"], summary["env"], summary["seed"]) == ("sac_preset", "Pendulum-v1", None)
    assert summary["headline"].startswith("Pendulum-v1/rlx2: ") and " over 2 seeds " in summary["headline"]
    index = (tmp_path / "results" / "README.md").read_text()  # every result in the index, seed 0 included
    for name in ("seed0", "seed1", "seed2", "summary"):
        assert f"(train/mujoco/sac_preset/Pendulum-v1/{name}.json)" in index
    with pytest.raises(SystemExit, match="names no sparse variant"):
        bench_train._seeds(_args(tmp_path, "--variants", "dense"))
    with pytest.raises(SystemExit, match="none of 3 sac_preset .* holds both dense and rlx2 for Pendulum-v1 at 900 "
                                         "steps"):
        bench_train._seeds(_args(tmp_path, "--steps", "900"))
    # --dense-from takes a setting folder: <DIR>/<env>/seed<N>.json of the run's seed
    again, _ = bench_train._mujoco(_args(tmp_path, "--variants", "rlx2", "--seed", "1", "--dense-from",
                                         str(env_dir.parent)))
    assert again["Pendulum-v1/dense"] == {"score": scores[1]["Pendulum-v1/dense"]["score"],
                                          "recorded_in": str(env_dir / "seed1.json")}


def test_seed_stats_against_hand_computed_figures():
    dense = np.array([100.0, 200.0, 300.0, 400.0])
    e = bench_train.seed_stats(dense, np.array([99.0, 190.0, 300.0, 396.0]))
    assert e["ratio_of_means"] == pytest.approx(985 / 1000)
    assert e["mean_ratio"] == pytest.approx((0.99 + 0.95 + 1.0 + 0.99) / 4)
    # per-seed ratios' deviations .0075, -.0325, .0175, .0075: squares sum to 1.475e-3
    assert e["ratio_se"] == pytest.approx(math.sqrt(1.475e-3 / 3) / 2)
    assert (e["diff_mean"], e["diff_se"]) == (pytest.approx(-3.75), pytest.approx(np.std([-1, -10, 0, -4], ddof=1) / 2))
    lo, hi = e["ratio_interval"]
    assert 0.95 <= lo < 0.985 < hi <= 1.0
    assert e["verdict"] == "unsure: the mean is above 97 %, the interval spans it"
    assert bench_train.seed_stats(dense, 0.99 * dense)["verdict"] == "met: the interval lies above 97 %"
    assert bench_train.seed_stats(dense, 0.9 * dense)["verdict"] == "not met: the interval lies below 97 %"
    assert bench_train.seed_stats(dense[:1], dense[:1])["verdict"] == "unsure: one seed (above 97 %)"
