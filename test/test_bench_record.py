"""bench_results/: paths with setting, environment and seed; refusal to overwrite another command's result;
explicit superseding into archive/; the generated index; the migrated tree and its one mapping."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lowrl_ros.bench import record

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench_results"


def _write(root: Path, command: str, **where) -> Path:
    return record.write_result(results={"steps": 10, "seed": where.get("seed"),
                                        "Pendulum-v1/dense": {"score": 2.0, "percent_of_dense": 100.0},
                                        "Pendulum-v1/rlx2": {"score": 1.0, "percent_of_dense": 50.0}},
                               md="| table |", command=command, root=root, **where)


def test_paths_carry_setting_env_and_seed_zero_included(tmp_path):
    path = record.result_path("train/mujoco", setting="td3_preset", env="Hopper-v5", seed=0, root=tmp_path)
    assert path == tmp_path / "train/mujoco/td3_preset/Hopper-v5/seed0"
    assert record.result_path("sim2real", setting="preset", env=["Pendulum-v1", "InvertedPendulum-v5"],
                              root=tmp_path) == tmp_path / "sim2real/preset/Pendulum-v1+InvertedPendulum-v5/result"
    assert record.result_path("inference", seed=3, root=tmp_path) == tmp_path / "inference/seed3"
    with pytest.raises(ValueError, match="needs a <env> level"):  # a result without its environment has no place
        record.result_path("train/mujoco", setting="td3_preset", seed=0)
    with pytest.raises(ValueError, match="inference/ has no <setting> level"):
        record.result_path("inference", setting="x")
    with pytest.raises(ValueError, match="unknown benchmark"):
        record.result_path("train_mujoco")


def test_another_command_is_refused_and_the_same_command_overwrites(tmp_path):
    where = {"bench": "train/mujoco", "setting": "sac_preset", "env": "Pendulum-v1", "seed": 0}
    first = _write(tmp_path, "lowrl bench train --part mujoco --envs Pendulum-v1", **where)
    assert first == tmp_path / "train/mujoco/sac_preset/Pendulum-v1/seed0.json"
    meta = json.loads(first.read_text())
    assert meta["command"] == "lowrl bench train --part mujoco --envs Pendulum-v1"
    assert (meta["setting"], meta["env"], meta["seed"]) == ("sac_preset", "Pendulum-v1", 0)
    assert meta["headline"] == "Pendulum-v1/rlx2: 50.0 % of dense (1.0 vs 2.0)" and meta["machine"]["cores"]
    assert meta["date"] and "- headline: Pendulum-v1/rlx2: 50.0 %" in first.with_suffix(".md").read_text()
    with pytest.raises(record.ResultExists) as err:
        _write(tmp_path, "lowrl bench train --part mujoco --envs Pendulum-v1 --steps 9", **where)
    assert "recorded: lowrl bench train --part mujoco --envs Pendulum-v1\n" in str(err.value)
    assert "this run: lowrl bench train --part mujoco --envs Pendulum-v1 --steps 9" in str(err.value)
    assert json.loads(first.read_text())["date"] == meta["date"]  # untouched
    again = _write(tmp_path, "lowrl bench train --part mujoco --envs Pendulum-v1", headline="rerun", **where)
    assert json.loads(again.read_text())["headline"] == "rerun"


def test_superseding_moves_the_old_result_to_the_archive_with_a_note(tmp_path):
    where = {"bench": "train/mujoco", "setting": "sac_preset", "env": "Pendulum-v1", "seed": 1}
    old = _write(tmp_path, "lowrl bench train --part mujoco --seed 1", **where)
    old.with_suffix(".png").write_bytes(b"\x89PNG")
    folder = record.archive([old], "old_schedule", "seed1 of the new schedule", root=tmp_path, date="2026-01-02")
    assert folder == tmp_path / "archive/2026-01-02_old_schedule"
    moved = folder / "train/mujoco/sac_preset/Pendulum-v1"
    assert sorted(p.name for p in moved.iterdir()) == ["seed1.json", "seed1.md", "seed1.png"]
    assert not old.exists() and "Replaced by: seed1 of the new schedule" in (folder / "NOTE.md").read_text()
    new = _write(tmp_path, "lowrl bench train --part mujoco --seed 1 --steps 9", **where)  # the place is free
    index = (tmp_path / "README.md").read_text()
    current, archived = index.split("## Archived")
    assert f"({new.relative_to(tmp_path)})" in current
    assert "(archive/2026-01-02_old_schedule/train/mujoco/sac_preset/Pendulum-v1/seed1.json)" in archived
    with pytest.raises(ValueError, match="archive reason"):
        record.archive([new], "no spaces please", "x", root=tmp_path)


def test_the_index_lists_every_json_and_marks_what_an_old_one_lacks(tmp_path):
    _write(tmp_path, "lowrl bench train --part mujoco", bench="train/mujoco", setting="sac_preset", env="Hopper-v5",
           seed=0)
    legacy = tmp_path / "loop/result.json"  # an old result: no headline, no command, no machine
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps({"benchmark": "loop", "date": "2026-11-22T12:38:23Z", "results": {"x": 1}}))
    stray = tmp_path / "somewhere/else.json"  # outside the layout: listed all the same
    stray.parent.mkdir()
    stray.write_text("{}")
    rows = {r["path"]: r for r in record.index_rows(tmp_path)}
    assert len(rows) == 3
    loop = rows["[loop/result.json](loop/result.json)"]
    assert (loop["bench"], loop["date"], loop["headline"], loop["command"], loop["machine"]) == \
        ("loop", "2026-11-22T12:38:23Z", "—", "—", "—")
    mujoco = rows["[train/mujoco/sac_preset/Hopper-v5/seed0.json](train/mujoco/sac_preset/Hopper-v5/seed0.json)"]
    assert (mujoco["setting"], mujoco["env"], mujoco["seeds"]) == ("sac_preset", "Hopper-v5", "0")
    assert rows["[somewhere/else.json](somewhere/else.json)"]["bench"] == "—"


def test_each_benchmark_owns_its_headline_rule():
    """The rule lives in the benchmark's module (train/<part>: train.<part>_headline); record only looks it up."""
    from lowrl_ros.bench import budget, train

    assert record.headline_rule("budget") is budget.headline
    assert record.headline_rule("train/speed") is train.speed_headline
    assert [b for b in record.LAYOUT if record.headline_rule(b) is None] == ["train/kernels"]
    assert record.headline_rule("nope") is None and record.derive_headline("nope", {"x": 1}) == record.NONE
    assert record.derive_headline("budget", {"cpu": {"monitor_10hz_minus_idle_pct": 0.123}}) == \
        "monitor at 10 Hz: 0.12 % of a core above idle"


def test_setting_names_are_the_flags_off_their_defaults():
    import argparse

    from lowrl_ros.bench import sim2real

    parser = argparse.ArgumentParser()
    sim2real.add_arguments(parser)
    name = lambda *argv: record.setting_of(parser.parse_args(argv), sim2real.add_arguments,  # noqa: E731
                                           skip=("envs", "out", "runs_dir"))
    assert name() == name("--envs", "Pendulum-v1", "--out", "x") == "preset"
    assert name("--all-versions", "--eval-episodes", "50", "--oracle") == "all_versions_eval_episodes50_oracle"
    assert name("--train-set", "batch_size=256") == "train_set_batch_size256"


# --- the committed tree -------------------------------------------------------------------------
def test_every_committed_result_lies_in_the_layout_and_the_index_is_current():
    jsons = sorted(RESULTS.rglob("*.json"))
    assert len(jsons) >= 41
    for path in jsons:
        where = record.parse_path(path.relative_to(RESULTS))
        assert where["bench"] is not None, path
        assert where["env"] or "env" not in record.LAYOUT[where["bench"]], path
        if where["archive"]:
            assert (RESULTS / record.ARCHIVE / where["archive"] / "NOTE.md").is_file(), path
    # the index is generated: regenerate it (python -m lowrl_ros.bench.record index) after moving results by hand
    assert (RESULTS / record.INDEX).read_text() == record.index_text(RESULTS)
    assert len([line for line in record.index_text(RESULTS).splitlines() if line.endswith(".json) |")]) == len(jsons)


def _migration():
    spec = importlib.util.spec_from_file_location("migrate_bench_results", REPO / "scripts/migrate_bench_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migration_mapping_lost_nothing_and_rewrites_old_references():
    m = _migration()
    targets = set(m.MAPPING.values())
    assert len(targets) == len(m.MAPPING) == 99  # one target per old file
    present = {p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*") if p.is_file()}
    assert targets <= present
    assert m.check(list(m.MAPPING)) == []
    assert "not mapped: extra.json" in m.check([*m.MAPPING, "extra.json"])
    old = "bench_results" + "/"  # split, so that --rewrite run over test/ leaves this input alone
    text = (f"see {old}train_mujoco_td3.json and {old}sim2real_pendulum_oracle/, "
            f"{old}train_mujoco_td3_nstep_at_30pct/train_mujoco_td3.json; {old}loop.md.")
    assert m.rewrite_text(text) == (
        "see bench_results/train/mujoco/td3_preset/HalfCheetah-v5/seed0.json and "
        "bench_results/sim2real/all_versions_eval_episodes50_oracle_oracle_steps30000/Pendulum-v1/, "
        "bench_results/archive/2026-11-25_nstep_at_30pct/train/mujoco/td3_preset/HalfCheetah-v5+Hopper-v5/seed0.json; "
        "bench_results/loop/result.md.")
    # f843a89's overwritten HalfCheetah + Hopper result survives in the archive, with both environments
    kept = json.loads((RESULTS / m.MAPPING["train_mujoco_td3_nstep_at_30pct/train_mujoco_td3.json"]).read_text())
    assert {"HalfCheetah-v5/rlx2", "Hopper-v5/rlx2"} <= set(kept["results"])


def test_pyplot_is_agg_and_importing_the_module_loads_no_matplotlib():
    code = ("import sys; import lowrl_ros.core.sim.plot as p; assert 'matplotlib' not in sys.modules; "
            "plt = p.pyplot(); import matplotlib; print(matplotlib.get_backend())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().lower() == "agg"


def test_a_session_bench_moves_an_earlier_session_aside_instead_of_reporting_it_again(tmp_path):
    """`lowrl bench sim2real_session` reuses its runs directory: an earlier session there (already decided) would
    end the new one at once and be reported as its result. It is kept under another name instead."""
    from lowrl_ros.bench.sim2real_session import move_aside

    gapped = tmp_path / "seed0" / "gapped"
    assert move_aside(gapped) is None  # nothing there yet
    (gapped / "offboard" / "sysid").mkdir(parents=True)
    (gapped / "offboard" / "sysid" / "status.json").write_text('{"state": "kept"}')
    first = move_aside(gapped)
    assert first is not None and first.name.startswith("gapped.earlier-") and not gapped.exists()
    assert (first / "offboard" / "sysid" / "status.json").read_text() == '{"state": "kept"}'
    gapped.mkdir()
    (gapped / "episodes.csv").write_text("x")
    second = move_aside(gapped)
    assert second != first and second.exists() and first.exists()


def test_a_session_bench_stopped_after_some_seeds_is_recorded_from_their_sessions(tmp_path, capsys):
    """`--collect` launches nothing: it writes the result from the finished seeds' sessions in --runs-dir (their
    episode returns, decision and release), and refuses a seed whose sessions are not there or not decided."""
    from lowrl_ros.cli import main as lowrl

    seed = tmp_path / "runs" / "seed0"
    header = "time_s,episode,end,return,steps,interventions,version\n"
    (seed / "nominal" / "finetune").mkdir(parents=True)
    (seed / "nominal" / "finetune" / "episode_terms.csv").write_text(
        header + "".join(f"{100 + 20 * i},{i},truncated,800,500,0,1\n" for i in range(2)))
    (seed / "gapped" / "finetune").mkdir(parents=True)
    rows = [(300, 1)] * 3 + [(600, 2), (700, 2), (650, 2)]  # the base, then v2: the judge's episode, then 2 more
    (seed / "gapped" / "finetune" / "episode_terms.csv").write_text(
        header + "".join(f"{100 + 20 * i},{i},truncated,{r},500,0,{v}\n" for i, (r, v) in enumerate(rows)))
    (seed / "gapped" / "offboard" / "sysid").mkdir(parents=True)
    (seed / "gapped" / "offboard" / "sysid" / "status.json").write_text(
        json.dumps({"state": "kept", "decision": "v2 kept", "released": [2], "identified": {}}))
    (seed / "gapped" / "releases").mkdir()
    (seed / "gapped" / "releases" / "v000002.lowrl").write_bytes(b"")
    args = lambda s: ["bench", "sim2real_session", "--robot", "legged", "--seeds", s, "--eval-episodes", "2",  # noqa
                      "--collect", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "results")]
    assert lowrl(args("0")) == 0
    written = list((tmp_path / "results").rglob("result.json"))
    assert len(written) == 1 and "collect" not in str(written[0])  # the setting is the run's, not the collection's
    got = json.loads(written[0].read_text())["results"]["seeds"][0]
    assert (got["state"], got["nominal_return"], got["before_return"], got["after_return"]) == ("kept", 800, 300, 675)
    assert got["recovered_pct"] == pytest.approx(75.0)
    assert not (seed / "trainer_params.yaml").exists()  # nothing of the run is rewritten
    with pytest.raises(SystemExit, match="no finished seed 1"):
        lowrl(args("1"))
    assert not (tmp_path / "runs" / "seed1").exists()  # nor is anything made for a seed that is not there
