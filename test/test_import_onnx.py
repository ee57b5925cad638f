"""`lowrl import` of plain ONNX MLPs (+ sidecar) and Isaac Lab run directories.

Every source is made here with real torch and torch.onnx.export, the way Isaac Lab's
``export_policy_as_onnx`` does it (``normalizer -> actor``, input ``obs`` [1, N], output ``actions``,
opset 11, legacy exporter) and the way torch's default (dynamo, opset 18) exporter does it; the
imported contract is compared with onnxruntime running the source file itself.
"""
from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
import yaml

from lowrl_ros.cli import main as lowrl_main
from lowrl_ros.core.importers.contract import parse_sidecar
from lowrl_ros.core.importers.registry import ImportOptions, ImportRefused, load_source, write_imported
from lowrl_ros.core.runtime.artifact import last_action_convention, reference_action
from lowrl_ros.core.runtime.engines import load_artifact

ACTS = {"elu": torch.nn.ELU, "relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "leaky_relu": torch.nn.LeakyReLU,
        "silu": torch.nn.SiLU, "softsign": torch.nn.Softsign,
        "gelu_tanh": lambda: torch.nn.GELU(approximate="tanh")}
N_OBS, N_ACT = 6, 3
JOINTS = ["LF_HAA", "LH_HAA", "RF_HAA", "RH_HAA", "LF_HFE", "LH_HFE", "RF_HFE", "RH_HFE",
          "LF_KFE", "LH_KFE", "RF_KFE", "RH_KFE"]
DEFAULT_POS = [0.0, 0.0, 0.0, 0.0, 0.4, -0.4, 0.4, -0.4, -0.8, 0.8, -0.8, 0.8]


class EmpiricalNorm(torch.nn.Module):
    """rsl_rl's EmpiricalNormalization forward ((x - mean) / (std + eps)) with frozen statistics."""

    def __init__(self, n: int, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.eps = 0.01
        self.register_buffer("_mean", torch.randn(1, n, generator=g))
        self.register_buffer("_std", torch.rand(1, n, generator=g) + 0.3)

    def forward(self, x):
        return (x - self._mean) / (self._std + self.eps)


class PolicyExporter(torch.nn.Module):
    """The shape of Isaac Lab's _OnnxPolicyExporter: ``actor(normalizer(x))`` (Identity without one)."""

    def __init__(self, actor: torch.nn.Sequential, normalizer: torch.nn.Module | None = None) -> None:
        super().__init__()
        self.actor = actor
        self.normalizer = normalizer if normalizer is not None else torch.nn.Identity()

    def forward(self, x):
        return self.actor(self.normalizer(x))


def mlp(n_in: int, n_out: int, act: str = "elu", hidden=(32, 16), seed: int = 0, out_tanh: bool = False):
    torch.manual_seed(seed)
    dims = [n_in, *hidden]
    mods: list[torch.nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        mods += [torch.nn.Linear(a, b), ACTS[act]()]
    mods.append(torch.nn.Linear(dims[-1], n_out))
    if out_tanh:
        mods.append(torch.nn.Tanh())
    with torch.no_grad():  # wider than the default init, so activations see their whole shape
        for m in mods:
            if isinstance(m, torch.nn.Linear):
                m.weight.mul_(2.0)
    return torch.nn.Sequential(*mods)


def export(module: torch.nn.Module, path, n_in: int, *, dynamo: bool = False, opset: int = 11,
           input_names=("obs",), output_names=("actions",), args=None):
    """torch.onnx.export as Isaac Lab calls it (legacy exporter, opset 11) or torch's default (dynamo, 18)."""
    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args if args is not None else (torch.zeros(1, n_in),), str(path),
                          export_params=True, opset_version=18 if dynamo else opset, input_names=list(input_names),
                          output_names=list(output_names), dynamo=dynamo, **({} if dynamo else {"dynamic_axes": {}}))
    return path


def write_sidecar(path, doc: dict):
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def ort_actions(path, obs: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return np.concatenate([sess.run(None, {name: o[None].astype(np.float32)})[0] for o in obs]).astype(np.float64)


def random_obs(n_obs: int, n: int = 1000, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 2.0, (n, n_obs)).astype(np.float32)


def plain_sidecar(low=-4.0, high=4.0):
    return {"observations": [{"name": "x", "size": N_OBS}],
            "actions": {"names": [f"a{i}" for i in range(N_ACT)], "low": low, "high": high},
            "control_period_s": 0.02}


# int8 budget (docs/runtime.md, "int8 < 5 % of the action range"; docs/compression.md's release gate
# "mean 2 %"): worst and mean |int8 - source| over the action range.
INT8_WORST, INT8_MEAN = 0.05, 0.02


def deployed(imp, path, obs: np.ndarray, *, int8: bool = False) -> dict[str, np.ndarray]:
    """The written artifact's actions on both engines (what the robot runs), per engine."""
    out = write_imported(imp, path, int8=int8)
    return {e: load_artifact(out, engine=e).act_batch(obs.astype(np.float64)) for e in ("ort", "numpy")}


def assert_int8_budget(got: dict, want: np.ndarray, span: np.ndarray) -> None:
    for engine, a in got.items():
        rel = np.abs(a - want) / span
        assert rel.max() <= INT8_WORST and rel.mean() <= INT8_MEAN, (engine, rel.max(), rel.mean())
        assert rel.max() > 1e-7, engine  # int8 really changed the weights (the check is not vacuous)


def cli(*argv) -> int:
    return lowrl_main(["import", *map(str, argv)])


# ---------------------------------------------------------------------------------------------- parity


@pytest.mark.parametrize("act", sorted(ACTS))
def test_isaaclab_style_export_every_activation(tmp_path, act):
    """Isaac Lab's exporter (normaliser baked in as Sub/Div, Gemm, opset 11): fp32 == onnxruntime on the source."""
    src = export(PolicyExporter(mlp(N_OBS, N_ACT, act), EmpiricalNorm(N_OBS)), tmp_path / "policy.onnx", N_OBS)
    write_sidecar(tmp_path / "policy.yaml", plain_sidecar())
    imp = load_source(src, None, ImportOptions())
    assert imp.kind == "onnx" and imp.weights.hidden_activation == act and imp.weights.output_activation == "none"
    obs = random_obs(N_OBS)
    want = np.clip(ort_actions(src, obs), -4, 4)
    got = reference_action(imp.weights, imp.contract, obs)
    assert np.abs(got - want).max() <= 1e-5 * 8.0
    assert np.ptp(want) > 1.0  # the actions really vary (the comparison is not of constants)
    for engine, a in deployed(imp, tmp_path / "fp32.onnx", obs).items():
        assert np.abs(a - want).max() <= 1e-5 * 8.0, engine
    assert_int8_budget(deployed(imp, tmp_path / "int8.onnx", obs, int8=True), want, np.full(N_ACT, 8.0))


@pytest.mark.parametrize("act", ["elu", "gelu_tanh", "silu", "softsign"])
def test_dynamo_export_matmul_and_decomposed_activations(tmp_path, act):
    """torch's default exporter (opset 18) decomposes GELU/Softsign differently: still recognised."""
    src = export(PolicyExporter(mlp(N_OBS, N_ACT, act), EmpiricalNorm(N_OBS)), tmp_path / "p.onnx", N_OBS,
                 dynamo=True)
    write_sidecar(tmp_path / "p.yaml", plain_sidecar())
    imp = load_source(src, "onnx", ImportOptions())
    assert imp.weights.hidden_activation == act
    obs = random_obs(N_OBS)
    got = reference_action(imp.weights, imp.contract, obs)
    assert np.abs(got - np.clip(ort_actions(src, obs), -4, 4)).max() <= 1e-5 * 8.0


def test_matmul_without_bias_then_silu(tmp_path):
    """Bias-free Linear layers export as a bare MatMul whose output feeds SiLU's two ops (Sigmoid and Mul)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(N_OBS, 16, bias=False), torch.nn.SiLU(),
                              torch.nn.Linear(16, N_ACT, bias=False))
    src = export(net, tmp_path / "p.onnx", N_OBS)
    write_sidecar(tmp_path / "p.yaml", plain_sidecar())
    imp = load_source(src, None, ImportOptions())
    assert imp.weights.hidden_activation == "silu" and not imp.weights.layers[0][1].any()
    obs = random_obs(N_OBS)
    assert np.abs(reference_action(imp.weights, imp.contract, obs) - np.clip(ort_actions(src, obs), -4, 4)).max() \
        <= 1e-5 * 8.0


def test_sidecar_contract_applies_like_the_env(tmp_path):
    """Per-group scale/offset, a normaliser and a clip in the sidecar, action scale/offset/limits: exact."""
    src = export(mlp(N_OBS, N_ACT, "elu", out_tanh=True), tmp_path / "p.onnx", N_OBS)
    mean, std = np.linspace(-1, 1, N_OBS), np.linspace(0.5, 2.0, N_OBS)
    doc = {
        "observations": [{"name": "ang_vel", "size": 3, "scale": 0.25},
                         {"name": "joint_pos", "names": ["hip", "knee"], "offset": [0.1, -0.7], "scale": [1.0, 2.0]},
                         "yaw"],
        "obs_normalizer": {"mean": mean.tolist(), "std": std.tolist(), "eps": 0.01},
        "obs_clip": 1.5,
        "actions": {"names": ["hip", "knee", "ankle"], "scale": 0.5, "offset": [0.1, -0.7, 0.3],
                    "low": [-0.2, -1.2, -0.1], "high": [0.4, -0.2, 0.6]},
        "control_period_s": 0.025,
    }
    write_sidecar(tmp_path / "p.yaml", doc)
    imp = load_source(src, None, ImportOptions(version=3))
    c = imp.contract
    assert c.obs_names == ("ang_vel[0]", "ang_vel[1]", "ang_vel[2]", "joint_pos[hip]", "joint_pos[knee]", "yaw")
    assert c.action_names == ("hip", "knee", "ankle") and c.control_period_s == 0.025 and c.version == 3
    assert c.obs_clip == 1.5 and imp.weights.output_activation == "tanh"
    obs = random_obs(N_OBS)
    scale = np.array([0.25] * 3 + [1.0, 2.0, 1.0])
    offset = np.array([0, 0, 0, 0.1, -0.7, 0])
    x = np.clip(((obs - offset) * scale - mean) / (std + 0.01), -1.5, 1.5).astype(np.float32)
    y = ort_actions(src, x)
    want = np.clip(np.array([0.1, -0.7, 0.3]) + 0.5 * y, c.action_low, c.action_high)
    got = reference_action(imp.weights, c, obs)
    span = np.array(c.action_high) - np.array(c.action_low)
    assert np.all(np.abs(got - want).max(axis=0) <= 1e-5 * span)
    for engine, a in deployed(imp, tmp_path / "fp32.onnx", obs).items():  # obs clip + action transform in the graph
        assert np.all(np.abs(a - want).max(axis=0) <= 1e-5 * span), engine


def test_sidecar_beside_or_given_and_missing(tmp_path):
    src = export(mlp(N_OBS, N_ACT), tmp_path / "p.onnx", N_OBS)
    with pytest.raises(ImportRefused, match="needs a contract sidecar.*p.yaml.*docs/import.md"):
        load_source(src, None, ImportOptions())
    other = write_sidecar(tmp_path / "robot.yaml", plain_sidecar())
    imp = load_source(src, None, ImportOptions(sidecar=other))
    assert imp.contract.action_names == ("a0", "a1", "a2")


# ------------------------------------------------------------------------------ Isaac Lab run directory


def _env_yaml(io_joint_order: bool = True) -> dict:
    """The parts of Isaac Lab's params/env.yaml (a dump of the env cfg) that the importer reads, as written."""
    noise = {"func": "isaaclab.utils.noise.noise_model:additive_uniform_noise", "operation": "add",
             "n_min": -0.1, "n_max": 0.1}

    def term(func, scale=None, clip=None):
        return {"func": f"isaaclab.envs.mdp.observations:{func}", "params": {}, "modifiers": None, "noise": noise,
                "clip": clip, "scale": scale, "history_length": 0, "flatten_history_dim": True}

    return {
        "viewer": {"eye": [7.5, 7.5, 7.5]},
        "sim": {"physics_prim_path": "/physicsScene", "device": "cuda:0", "dt": 0.005, "render_interval": 4,
                "gravity": [0.0, 0.0, -9.81]},
        "decimation": 4,
        "episode_length_s": 20.0,
        "scene": {"num_envs": 4096, "env_spacing": 2.5, "robot": {
            "class_type": "isaaclab.assets.articulation.articulation:Articulation",
            "prim_path": "/World/envs/env_.*/Robot",
            "init_state": {"pos": [0.0, 0.0, 0.6], "rot": [1.0, 0.0, 0.0, 0.0],
                           "joint_pos": {".*HAA": 0.0, ".*F_HFE": 0.4, ".*H_HFE": -0.4, ".*F_KFE": -0.8,
                                         ".*H_KFE": 0.8},
                           "joint_vel": {".*": 0.0}}}},
        "observations": {"policy": {
            "concatenate_terms": True, "enable_corruption": True, "history_length": None,
            "flatten_history_dim": True,
            "base_lin_vel": term("base_lin_vel"),
            "base_ang_vel": term("base_ang_vel", scale=0.25),
            "projected_gravity": term("projected_gravity"),
            "velocity_commands": {**term("generated_commands"), "params": {"command_name": "base_velocity"},
                                  "noise": None},
            "joint_pos": term("joint_pos_rel"),
            "joint_vel": term("joint_vel_rel", scale=0.05),
            "actions": {**term("last_action"), "noise": None},
        }},
        "actions": {"joint_pos": {
            "class_type": "isaaclab.envs.mdp.actions.joint_actions:JointPositionAction", "asset_name": "robot",
            "debug_vis": False, "clip": None, "joint_names": [".*"], "scale": 0.5, "offset": 0.0,
            "preserve_order": False, "use_default_offset": True}},
        "commands": {"base_velocity": {"resampling_time_range": [10.0, 10.0]}},
    }


def _io_descriptors() -> dict:
    """IO_descriptors.yaml as Isaac Lab >= 2.2 writes it (the fields read: names, shapes, scale, offset)."""
    def obs(name, func, size, scale=None, joints=False):
        d = {"dtype": "torch.float32", "extras": {"description": name, "modifiers": None},
             "full_path": f"isaaclab.envs.mdp.observations.{func}", "mdp_type": "Observation", "name": name,
             "observation_type": "RootState",
             "overloads": {"clip": None, "flatten_history_dim": True, "history_length": 0, "scale": scale},
             "shape": [size]}
        if joints:
            d["joint_names"] = list(JOINTS)
        return d

    return {
        "actions": [{"action_type": "JointAction", "clip": None, "dtype": "torch.float32",
                     "full_path": "isaaclab.envs.mdp.actions.joint_actions.JointPositionAction",
                     "joint_names": list(JOINTS), "mdp_type": "Action", "name": "joint_position_action",
                     "offset": list(DEFAULT_POS), "scale": 0.5, "shape": [12]}],
        "articulations": {"robot": {"joint_names": list(JOINTS), "default_joint_pos": list(DEFAULT_POS),
                                    "default_joint_pos_limits": [[-0.7853984236717224, 0.6108654141426086]] * 2
                                    + [[-0.6108654141426086, 0.7853984236717224]] * 2
                                    + [[-9.42477798461914, 9.42477798461914]] * 8}},
        "observations": {"policy": [
            obs("base_lin_vel", "base_lin_vel", 3), obs("base_ang_vel", "base_ang_vel", 3, 0.25),
            obs("projected_gravity", "projected_gravity", 3), obs("generated_commands", "generated_commands", 3),
            obs("joint_pos_rel", "joint_pos_rel", 12, joints=True),
            obs("joint_vel_rel", "joint_vel_rel", 12, 0.05, joints=True), obs("last_action", "last_action", 12)]},
        "scene": {"decimation": 4, "dt": 0.02, "physics_dt": 0.005},
    }


def make_run(tmp_path, *, io: bool | str = True, env: dict | None = None):
    """A small Isaac Lab run directory: exported/policy.onnx (48 -> 12, ELU, normaliser), params/, IO descriptors.

    ``io``: where the IO descriptors go, relative to the run; True: where train.py --export_io_descriptors puts
    them (ManagerBasedEnv.export_IO_descriptors: <log_dir>/io_descriptors/IO_descriptors.yaml); False: none.
    """
    run = tmp_path / "2026-11-26_00-00-00"
    (run / "exported").mkdir(parents=True)
    (run / "params").mkdir()
    export(PolicyExporter(mlp(48, 12, "elu", hidden=(64, 32, 16)), EmpiricalNorm(48)),
           run / "exported" / "policy.onnx", 48)
    (run / "params" / "env.yaml").write_text(yaml.safe_dump(env or _env_yaml(), sort_keys=False))
    agent = {"seed": 42, "device": "cuda:0", "num_steps_per_env": 24, "max_iterations": 1500,
             "experiment_name": "anymal_d_flat", "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
             "actor": {"class_name": "MLPModel", "hidden_dims": [64, 32, 16], "activation": "elu",
                       "obs_normalization": True,
                       "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
             "algorithm": {"class_name": "PPO", "learning_rate": 0.001}}
    (run / "params" / "agent.yaml").write_text(yaml.safe_dump(agent, sort_keys=False))
    if io:
        path = run / (io if isinstance(io, str) else "io_descriptors/IO_descriptors.yaml")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(_io_descriptors(), sort_keys=False))
    return run


def _isaac_want(run, obs: np.ndarray) -> np.ndarray:
    """What Isaac Lab commands: default_pos + 0.5 * policy(term-scaled obs)."""
    scale = np.ones(48)
    scale[3:6] = 0.25
    scale[24:36] = 0.05
    y = ort_actions(run / "exported" / "policy.onnx", (obs * scale).astype(np.float32))
    return np.array(DEFAULT_POS) + 0.5 * y


def test_isaaclab_run_dir_with_io_descriptors(tmp_path):
    run = make_run(tmp_path)
    imp = load_source(run, None, ImportOptions())
    c = imp.contract
    assert imp.kind == "isaaclab" and imp.weights.hidden_activation == "elu"
    assert c.control_period_s == pytest.approx(0.02)
    assert c.action_names == tuple(JOINTS)
    assert c.obs_names[:4] == ("base_lin_vel[0]", "base_lin_vel[1]", "base_lin_vel[2]", "base_ang_vel[0]")
    assert c.obs_names[12] == "joint_pos_rel[LF_HAA]" and c.obs_names[-1] == "last_action[11]"
    assert np.allclose(c.action_offset, DEFAULT_POS) and np.allclose(c.action_scale, 0.5)
    assert any("last_action" in n for n in imp.notes) and any("0.005 x decimation 4" in n for n in imp.notes)
    obs = random_obs(48)
    got = reference_action(imp.weights, c, obs)
    want = np.clip(_isaac_want(run, obs), c.action_low, c.action_high)
    span = np.array(c.action_high) - np.array(c.action_low)
    assert np.all(np.abs(got - want).max(axis=0) <= 1e-5 * span)
    assert np.all(np.array(c.action_high)[4:] == pytest.approx(9.42477798461914))  # joint limits from the IO file
    assert np.mean((want == c.action_low) | (want == c.action_high)) < 0.5  # mostly inside the limits
    for engine, a in deployed(imp, tmp_path / "fp32.onnx", obs).items():
        assert np.all(np.abs(a - want).max(axis=0) <= 1e-5 * span), engine
    assert_int8_budget(deployed(imp, tmp_path / "int8.onnx", obs, int8=True), want, span)


@pytest.mark.parametrize("where", [
    "io_descriptors/IO_descriptors.yaml",  # train.py --export_io_descriptors: <log_dir>/io_descriptors/
    "IO_descriptors.yaml",  # train.py setting io_descriptors_output_dir = the run directory
    "exported/isaac_velocity_flat_anymal_d_v0_IO_descriptors.yaml",  # export_IODescriptors.py --output_dir exported
    "io_descriptors/isaac_velocity_flat_anymal_d_v0_IO_descriptors.yaml",
])
def test_isaaclab_io_descriptors_found_where_isaac_lab_writes_them(tmp_path, where):
    """Without the IO file the regex joint names and per-joint defaults are refused; found, they are read."""
    imp = load_source(make_run(tmp_path, io=where), None, ImportOptions())
    assert imp.contract.action_names == tuple(JOINTS)
    assert imp.contract.provenance["isaaclab_io_descriptors"] == "true"
    assert any(f"IO descriptors read from {tmp_path}" in n and n.endswith(where) for n in imp.notes)


def test_isaaclab_io_descriptors_given_explicitly(tmp_path):
    run = make_run(tmp_path, io=False)
    elsewhere = make_run(tmp_path / "other", io="somewhere/IO.yaml") / "somewhere" / "IO.yaml"
    with pytest.raises(ImportRefused, match="export IO descriptors"):
        load_source(run, None, ImportOptions())
    imp = load_source(run, None, ImportOptions(io_descriptors=elsewhere))
    assert imp.contract.action_names == tuple(JOINTS)
    with pytest.raises(ImportRefused, match="no such IO descriptors file"):
        load_source(run, None, ImportOptions(io_descriptors=tmp_path / "missing.yaml"))
    assert lowrl_main(["import", str(run), "--io-descriptors", str(elsewhere), "-o", str(tmp_path / "p.onnx")]) == 0


def test_isaaclab_io_descriptors_of_several_tasks_are_not_guessed(tmp_path):
    run = make_run(tmp_path, io="exported/task_a_IO_descriptors.yaml")
    (run / "exported" / "task_b_IO_descriptors.yaml").write_text((run / "exported" / "task_a_IO_descriptors.yaml")
                                                                  .read_text())
    with pytest.raises(ImportRefused, match="several IO descriptor files.*--io-descriptors"):
        load_source(run, None, ImportOptions())


def test_isaaclab_run_records_the_raw_last_action(tmp_path):
    run = make_run(tmp_path)
    assert last_action_convention(load_source(run, None, ImportOptions()).contract) == "raw"
    assert last_action_convention(load_source(run / "exported" / "policy.onnx", None, ImportOptions()).contract) \
        == "raw"
    forced = load_source(run, None, ImportOptions(last_action="action")).contract
    assert last_action_convention(forced) == "action"


def test_isaaclab_exported_onnx_finds_its_run_dir(tmp_path):
    run = make_run(tmp_path)
    a = load_source(run, None, ImportOptions()).contract
    b = load_source(run / "exported" / "policy.onnx", None, ImportOptions()).contract
    assert a.same_io(b) and a.action_offset == b.action_offset and a.obs_scale == b.obs_scale


def test_isaaclab_run_dir_through_the_cli(tmp_path, capsys):
    run = make_run(tmp_path)
    out = tmp_path / "anymal.onnx"
    assert cli(run, "-o", out, "--int8") == 0
    text = capsys.readouterr().out
    assert "wrote" in text and "isaaclab" in text and "joint position limits" in text
    policy = load_artifact(out)
    assert policy.contract.action_names == tuple(JOINTS) and policy.contract.control_period_s == pytest.approx(0.02)


def test_isaaclab_run_dir_env_yaml_only(tmp_path):
    """Without IO descriptors: term sizes from Isaac Lab's standard terms, uniform default pose; generic joint names."""
    env = _env_yaml()
    env["scene"]["robot"]["init_state"]["joint_pos"] = {".*": 0.1}
    env["observations"]["policy"]["joint_pos"]["clip"] = [-3.0, 3.0]
    run = make_run(tmp_path, io=False, env=env)
    imp = load_source(run, None, ImportOptions())
    c = imp.contract
    assert c.action_names[0] == "joint_0" and np.allclose(c.action_offset, 0.1)
    assert c.obs_names[12] == "joint_pos[0]" and len(c.obs_names) == 48
    assert any("clipped to [-3, 3]" in n for n in imp.notes)
    assert c.provenance["obs_term_clip.joint_pos"] == "[-3, 3]"
    obs = random_obs(48)
    scale = np.ones(48)
    scale[3:6], scale[24:36] = 0.25, 0.05
    want = 0.1 + 0.5 * ort_actions(run / "exported" / "policy.onnx", (obs * scale).astype(np.float32))
    assert np.abs(reference_action(imp.weights, c, obs) - want).max() <= 1e-5


def test_isaaclab_run_dir_needs_names_for_per_joint_defaults(tmp_path):
    run = make_run(tmp_path, io=False)
    with pytest.raises(ImportRefused, match="default joint positions differ per joint.*IO descriptors"):
        load_source(run, None, ImportOptions())


# ---------------------------------------------------------------------------------------------- refusals


class Lstm(torch.nn.Module):
    """Isaac Lab's recurrent ONNX export: inputs obs, h_in, c_in; outputs actions, h_out, c_out."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(N_OBS, 8)
        self.actor = torch.nn.Sequential(torch.nn.Linear(8, N_ACT))

    def forward(self, x, h, c):
        y, (h, c) = self.rnn(x.unsqueeze(0), (h, c))
        return self.actor(y.squeeze(0)), h, c


class ConvPolicy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 2, 3)
        self.head = torch.nn.Linear(2 * (N_OBS - 2), N_ACT)

    def forward(self, x):
        return self.head(self.conv(x.unsqueeze(1)).flatten(1))


class TwoInputs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(N_OBS, N_ACT)

    def forward(self, x, goal):
        return self.net(x) + goal


class PerActionScale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp(N_OBS, N_ACT)
        self.register_buffer("scale", torch.tensor([0.5, 1.0, 2.0]))

    def forward(self, x):
        return self.net(x) * self.scale


class ScaledTanh(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp(N_OBS, N_ACT, out_tanh=True)

    def forward(self, x):
        return 2.0 * self.net(x)


def _refusal_sources(tmp_path) -> dict:
    h = torch.zeros(1, 1, 8)
    srcs = {
        "lstm": (export(Lstm(), tmp_path / "lstm.onnx", N_OBS, args=(torch.zeros(1, N_OBS), h, h),
                        input_names=("obs", "h_in", "c_in"), output_names=("actions", "h_out", "c_out")),
                 "LSTM"),
        "conv": (export(ConvPolicy(), tmp_path / "conv.onnx", N_OBS), "convolutional"),
        "inputs": (export(TwoInputs(), tmp_path / "inputs.onnx", N_OBS,
                          args=(torch.zeros(1, N_OBS), torch.zeros(1, N_ACT)), input_names=("obs", "goal")),
                   "inputs \\[.obs., .goal.\\]; exactly one"),
        "discrete": (export(torch.nn.Sequential(mlp(N_OBS, N_ACT), torch.nn.Softmax(dim=-1)),
                            tmp_path / "discrete.onnx", N_OBS), "discrete"),
        "scaled_tanh": (export(ScaledTanh(), tmp_path / "scaled_tanh.onnx", N_OBS), "actions.scale"),
        "action_scale": (export(PerActionScale(), tmp_path / "action_scale.onnx", N_OBS),
                         "constant of 3 values.*actions.scale/offset"),
        "gelu_erf": (export(torch.nn.Sequential(torch.nn.Linear(N_OBS, 8), torch.nn.GELU(), torch.nn.Linear(8, N_ACT)),
                            tmp_path / "gelu_erf.onnx", N_OBS), "approximate='tanh'"),
    }
    good = export(mlp(N_OBS, N_ACT), tmp_path / "good.onnx", N_OBS)
    data = good.read_bytes()
    (tmp_path / "truncated.onnx").write_bytes(data[: len(data) // 2])
    srcs["truncated"] = (tmp_path / "truncated.onnx", "truncated")
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(good))
    init = model.graph.initializer[0]
    arr = numpy_helper.to_array(init).copy()
    arr.flat[0] = np.nan
    init.CopyFrom(numpy_helper.from_array(arr, init.name))
    onnx.save(model, str(tmp_path / "nan.onnx"))
    srcs["nan"] = (tmp_path / "nan.onnx", "NaN or Inf")
    imp = load_source(good, None, ImportOptions(sidecar=write_sidecar(tmp_path / "good.yaml", plain_sidecar())))
    write_imported(imp, tmp_path / "artifact.onnx")
    srcs["artifact"] = (tmp_path / "artifact.onnx", "already a lowrl artifact")
    for name, _ in list(srcs.items()):
        write_sidecar(tmp_path / f"{name}.yaml", plain_sidecar())
    return srcs


def test_refusals_one_line_exit_2_nothing_written(tmp_path, capsys):
    for name, (src, why) in _refusal_sources(tmp_path).items():
        out = tmp_path / f"{name}_out.onnx"
        capsys.readouterr()
        assert cli(src, "-o", out) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("lowrl import: "), (name, err)
        assert __import__("re").search(why, err), (name, err)
        assert not out.exists(), name


@pytest.mark.parametrize("doc, why", [
    ({**plain_sidecar(), "observations": [{"name": "x", "size": N_OBS - 1}]}, "names 5 observations.*reads 6"),
    ({**plain_sidecar(), "actions": {"names": ["a", "b"]}}, "names 2 actions.*outputs 3"),
    ({**plain_sidecar(), "action_names": ["a"]}, "unknown keys \\['action_names'\\]"),
    ({**plain_sidecar(), "obs_clip": float("nan")}, "obs_clip contains NaN"),
    ({**plain_sidecar(), "actions": {"names": ["a", "b", "c"], "low": [0, 0, 0], "high": [1, -1, 1]}},
     "low must be < actions.high"),
    ({"actions": {"names": ["a"]}}, "'observations' is missing"),
])
def test_bad_sidecars(tmp_path, capsys, doc, why):
    src = export(mlp(N_OBS, N_ACT), tmp_path / "p.onnx", N_OBS)
    write_sidecar(tmp_path / "p.yaml", doc)
    out = tmp_path / "out.onnx"
    assert cli(src, "-o", out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and __import__("re").search(why, err), err
    assert not out.exists()


def test_sidecar_parser_rejects_what_it_cannot_mean():
    with pytest.raises(ImportRefused, match="give 'size' or 'names', not both"):
        parse_sidecar({"observations": [{"name": "q", "size": 2, "names": ["a", "b"]}], "actions": ["a"]}, "s")
    with pytest.raises(ImportRefused, match="repeat"):
        parse_sidecar({"observations": ["q", "q"], "actions": ["a"]}, "s")
    with pytest.raises(ImportRefused, match="scale has 3 values for 2 entries"):
        parse_sidecar({"observations": [{"name": "q", "size": 2, "scale": [1, 2, 3]}], "actions": ["a"]}, "s")


def test_the_documented_sidecar_example_imports(tmp_path):
    """The complete example in docs/import.md is a valid sidecar for a 48 -> 12 Isaac Lab policy."""
    import re as _re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "import.md").read_text()
    block = _re.search(r"### The sidecar.*?```yaml\n(.*?)```", page, _re.DOTALL).group(1)
    src = export(mlp(48, 12, "elu"), tmp_path / "policy.onnx", 48)  # its normaliser is in the sidecar
    (tmp_path / "robot.yaml").write_text(block)
    imp = load_source(src, None, ImportOptions(sidecar=tmp_path / "robot.yaml"))
    c = imp.contract
    assert len(c.obs_names) == 48 and c.action_names[4] == "LF_HFE" and c.action_offset[4] == 0.4
    assert c.obs_clip == 100.0 and c.control_period_s == 0.02 and c.provenance["trained_with"] == "isaaclab-2.2"
    assert any("'last_action' is clipped" in n for n in imp.notes)
