"""What an Isaac Lab run directory says about a policy's contract (off-board; docs/import.md).

Isaac Lab's ``play.py`` exports ``<run>/exported/policy.onnx``, which holds the network but not its
contract; the run directory records the rest, and this module turns it into a sidecar document (see
importers/contract.py), used for an Isaac Lab run, its exported ONNX (importers/onnx.py) and an
rsl_rl checkpoint inside it (importers/rsl_rl.py). It reads YAML only: no onnx, no torch.

Read from params/env.yaml (a dump of the env cfg dataclass): decimation, sim.dt,
observations.policy.<term>.{func, scale, clip, history_length, params.asset_cfg.joint_names},
actions.<term>.{class_type, joint_names, scale, offset, use_default_offset, clip},
scene.robot.init_state.joint_pos (regex -> default position).
From IO_descriptors.yaml (Isaac Lab >= 2.2, ``--export_io_descriptors``; :func:`find_io_descriptors` says
where Isaac Lab puts it), when present, which wins:
observations.policy[*].{name, shape, joint_names, overloads.{scale, clip, history_length}},
actions[*].{joint_names, scale, offset, clip}, scene.{dt}.
From params/agent.yaml: nothing the contract needs (the ONNX carries the normaliser); recorded.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.importers.contract import DOCS, Sidecar, parse_sidecar
from lowrl_ros.core.importers.registry import ImportRefused

# Sizes of Isaac Lab's standard observation functions (isaaclab.envs.mdp.observations) when no IO
# descriptors say so; "J" = one per joint of the action, "A" = the action size.
_TERM_SIZES = {"base_lin_vel": 3, "base_ang_vel": 3, "projected_gravity": 3, "generated_commands": 3,
               "root_lin_vel_w": 3, "root_ang_vel_w": 3, "base_pos_z": 1, "root_quat_w": 4,
               "joint_pos": "J", "joint_pos_rel": "J", "joint_vel": "J", "joint_vel_rel": "J",
               "joint_pos_limit_normalized": "J", "joint_effort": "J", "last_action": "A"}


def lenient_yaml_loader():
    """A SafeLoader that reads the python tags of Isaac Lab's dumps (tuples, slices) as plain data."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def _seq(loader, suffix, node):  # noqa: ARG001
        return loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode) else loader.construct_scalar(node)

    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", _seq)
    return _Loader


def _yaml(path: Path, where: str) -> Any:
    import yaml

    try:
        return yaml.load(path.read_text(), Loader=lenient_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ImportRefused(f"{where}: not a readable YAML file ({first})") from None


def _func_name(func: Any) -> str:
    s = str(func or "")
    return re.split(r"[:.]", s)[-1]


def _scalar_or_list(v: Any) -> Any:
    return 1.0 if v is None else v


def _default_positions(init_joint_pos: Any, joint_names: list[str], where: str) -> np.ndarray:
    """Isaac Lab's init_state.joint_pos (regex -> value) resolved for ``joint_names`` (first match wins)."""
    if not isinstance(init_joint_pos, dict):
        init_joint_pos = {".*": 0.0}
    out = []
    for j in joint_names:
        for pattern, value in init_joint_pos.items():
            if re.fullmatch(str(pattern), j):
                out.append(float(value))
                break
        else:
            raise ImportRefused(f"{where}: no default position for joint {j!r} in scene.robot.init_state.joint_pos")
    return np.array(out)


def _joint_limits(io: Any, joint_names: list[str]) -> tuple[list[float], list[float]] | None:
    """Per-joint (low, high) position limits from the IO descriptors' articulation, if recorded."""
    for art in ((io or {}).get("articulations") or {}).values():
        names, lims = art.get("joint_names"), art.get("default_joint_pos_limits")
        if not (isinstance(names, list) and isinstance(lims, list) and len(names) == len(lims)):
            continue
        table = dict(zip(names, lims))
        if all(j in table for j in joint_names):
            pairs = np.asarray([table[j] for j in joint_names], np.float64)
            if pairs.shape == (len(joint_names), 2) and np.isfinite(pairs).all() and np.all(pairs[:, 0] < pairs[:, 1]):
                return pairs[:, 0].tolist(), pairs[:, 1].tolist()
    return None


# Where Isaac Lab writes IO_descriptors.yaml for a run, in the order looked at (docs/import.md names the
# versions checked): ManagerBasedEnv.export_IO_descriptors() with cfg.log_dir = the run directory (train.py
# --export_io_descriptors) writes <run>/io_descriptors/; the train.py scripts that set
# io_descriptors_output_dir = the run directory, <run>/; params/ where a user copied it beside env.yaml.
IO_DESCRIPTOR_PATHS = ("io_descriptors/IO_descriptors.yaml", "IO_descriptors.yaml", "params/IO_descriptors.yaml")
# scripts/environments/export_IODescriptors.py --task T --output_dir D writes D/<t>_IO_descriptors.yaml
# (t: the task id lower-cased, '-' -> '_'); D inside the run or its exported/ folder is found.
IO_DESCRIPTOR_GLOB_DIRS = (".", "io_descriptors", "exported", "params")


def find_io_descriptors(run_dir: Path, explicit: Path | None = None) -> Path | None:
    """The run's IO_descriptors.yaml: ``explicit`` (--io-descriptors), else where Isaac Lab writes it; None.

    Raises ImportRefused for an explicit path that is not a file, and when the exporter script's
    ``<task>_IO_descriptors.yaml`` files of several tasks lie in the run (which one is not guessed).
    """
    if explicit is not None:
        if not Path(explicit).is_file():
            raise ImportRefused(f"{explicit}: no such IO descriptors file; give the IO_descriptors.yaml Isaac Lab "
                                "exported (--io-descriptors PATH)")
        return Path(explicit)
    for rel in IO_DESCRIPTOR_PATHS:
        if (run_dir / rel).is_file():
            return run_dir / rel
    found = sorted({p for d in IO_DESCRIPTOR_GLOB_DIRS for p in (run_dir / d).glob("*_IO_descriptors.yaml")
                    if p.is_file()})
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(run_dir)) for p in found)
        raise ImportRefused(f"{run_dir}: several IO descriptor files ({names}); "
                            "name the one of this policy's task with --io-descriptors PATH")
    return found[0] if found else None


def isaaclab_sidecar(run_dir: Path, n_obs: int, n_act: int, notes: list[str],
                     io_descriptors: Path | None = None) -> dict:
    """A sidecar document (see :func:`parse_sidecar`) filled from an Isaac Lab run directory.

    ``io_descriptors``: the IO_descriptors.yaml to read (None: :func:`find_io_descriptors` looks).
    """
    env_path = run_dir / "params" / "env.yaml"
    if not env_path.is_file():
        raise ImportRefused(f"{run_dir}: no params/env.yaml; give the run directory Isaac Lab wrote "
                            "(logs/rsl_rl/<task>/<date>) or the ONNX with --sidecar")
    env = _yaml(env_path, str(env_path)) or {}
    io_path = find_io_descriptors(run_dir, io_descriptors)
    io = _yaml(io_path, str(io_path)) if io_path is not None else None
    if io_path is not None:
        notes.append(f"IO descriptors read from {io_path}")
    elif isinstance(env, dict) and env.get("export_io_descriptors") is True:
        notes.append("params/env.yaml says export_io_descriptors: true but no IO_descriptors.yaml is where Isaac Lab "
                     "writes it (io_descriptors/ in the run); give it with --io-descriptors PATH")
    where = str(env_path)
    try:
        dt = float(env["sim"]["dt"])
        decimation = int(env["decimation"])
    except (KeyError, TypeError, ValueError):
        raise ImportRefused(f"{where}: sim.dt and decimation are missing; is this an Isaac Lab env.yaml?") from None
    period = dt * decimation
    obs_cfg = ((env.get("observations") or {}).get("policy")) if isinstance(env.get("observations"), dict) else None
    if not isinstance(obs_cfg, dict):
        raise ImportRefused(f"{where}: observations.policy is missing; only manager-based envs with a 'policy' "
                            "observation group can be read (give --sidecar for a direct env)")
    if obs_cfg.get("concatenate_terms") is False:
        raise ImportRefused(f"{where}: observations.policy.concatenate_terms is false (Dict observations); only a "
                            "flat observation vector is supported")
    act_cfg = env.get("actions") or {}
    act_terms = [(k, v) for k, v in act_cfg.items() if isinstance(v, dict)]
    if len(act_terms) != 1:
        raise ImportRefused(f"{where}: {len(act_terms)} action terms {[k for k, _ in act_terms]}; one joint action "
                            "term is supported (give --sidecar for others)")
    act_name, act = act_terms[0]
    cls = str(act.get("class_type", ""))
    # ---- actions
    io_act = (io or {}).get("actions") if isinstance(io, dict) else None
    names_known = True
    if io_act:
        a = io_act[0]
        joint_names = list(a.get("joint_names") or [])
        scale = a.get("scale", 1.0)
        offset = a.get("offset", 0.0)
        clip = a.get("clip")
    else:
        jn = act.get("joint_names") or [".*"]
        default = ((env.get("scene") or {}).get("robot") or {}).get("init_state", {}).get("joint_pos", {})
        if jn != [".*"] and not isinstance(jn, list):
            jn = [jn]
        names_known = not any(re.escape(p) != p for p in jn)
        if not names_known:
            # regexes need the articulation's joint names, which only the IO descriptors record
            joint_names = [f"joint_{i}" for i in range(n_act)]
            if act.get("use_default_offset") and isinstance(default, dict) and len(set(default.values())) > 1:
                raise ImportRefused(f"{run_dir}: the action's default joint positions differ per joint but the joint "
                                    "names are not recorded; export IO descriptors (train.py --export_io_descriptors, "
                                    f"Isaac Lab >= 2.2; or --io-descriptors PATH) or give --sidecar ({DOCS})")
            notes.append("joint names not recorded (no IO_descriptors.yaml): actions named joint_0..; export IO "
                         "descriptors for real names")
        else:
            joint_names = list(jn)
        scale = act.get("scale", 1.0)
        offset = act.get("offset", 0.0)
        if act.get("use_default_offset"):
            if names_known:
                offset = _default_positions(default, joint_names, where)
            else:  # one value for every joint (checked above)
                offset = float(next(iter(default.values()))) if isinstance(default, dict) and default else 0.0
        clip = act.get("clip")
    if "JointPosition" not in cls and "JointAction" not in cls and cls:
        notes.append(f"action term {act_name!r} is {cls.split(':')[-1]}: check the controller interface it needs")
    if len(joint_names) != n_act:
        raise ImportRefused(f"{run_dir}: the action term has {len(joint_names)} joints but the policy outputs {n_act}")
    if isinstance(scale, dict) or isinstance(offset, dict):
        raise ImportRefused(f"{where}: per-joint action scale/offset given as a regex mapping; export IO descriptors "
                            f"or give --sidecar ({DOCS})")
    actions: dict[str, Any] = {"names": joint_names, "scale": _scalar_or_list(scale),
                               "offset": np.asarray(offset, np.float64).tolist() if offset is not None else 0.0}
    limits = _joint_limits(io, joint_names) if io_act and ("JointPosition" in cls or "JointPosition" in str(
        io_act[0].get("full_path", ""))) else None
    if limits is not None:
        actions["low"], actions["high"] = limits
        notes.append("action limits = the articulation's joint position limits (IO descriptors)")
    if clip is not None:
        clip_arr = np.asarray(clip, np.float64)
        if clip_arr.shape == (2,):
            clip_arr = np.tile(clip_arr, (n_act, 1))
        if clip_arr.shape != (n_act, 2):
            raise ImportRefused(f"{where}: action clip {clip!r} is not [low, high] per joint")
        notes.append("action clip from the action term applied to the raw action: the artifact clips the scaled "
                     "action instead (joint limits)")
        s = np.broadcast_to(np.asarray(actions["scale"], np.float64), (n_act,))
        o = np.broadcast_to(np.asarray(actions["offset"], np.float64), (n_act,))
        lo, hi = o + s * clip_arr[:, 0], o + s * clip_arr[:, 1]
        lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
        if "low" in actions:  # both apply: the tighter one wins
            lo, hi = np.maximum(lo, actions["low"]), np.minimum(hi, actions["high"])
        actions["low"], actions["high"] = lo.tolist(), hi.tolist()
    # ---- observations
    observations: list[dict] = []
    last_action_terms: list[str] = []
    io_obs = ((io or {}).get("observations") or {}).get("policy") if isinstance(io, dict) else None
    if io_obs:
        for t in io_obs:
            shape = t.get("shape") or [1]
            over = t.get("overloads") or {}
            size = int(np.prod(shape))
            g: dict[str, Any] = {"name": str(t["name"])}
            if _func_name(t.get("full_path")) == "last_action":
                last_action_terms.append(g["name"])
            if t.get("joint_names") and len(t["joint_names"]) == size:
                g["names"] = list(t["joint_names"])
            else:
                g["size"] = size
            if over.get("scale") is not None:
                g["scale"] = over["scale"]
            if over.get("clip") is not None:
                g["clip"] = list(over["clip"])
            observations.append(g)
    else:
        terms = [(k, v) for k, v in obs_cfg.items() if isinstance(v, dict) and "func" in v]
        sizes: list[int | None] = []
        for name, t in terms:
            s = _TERM_SIZES.get(_func_name(t.get("func")))
            sizes.append(n_act if s in ("J", "A") else s)
        unknown = [i for i, s in enumerate(sizes) if s is None]
        known = sum(s for s in sizes if s is not None)
        if len(unknown) == 1 and n_obs - known > 0:
            sizes[unknown[0]] = n_obs - known
            notes.append(f"size of observation term {terms[unknown[0]][0]!r} ({n_obs - known}) inferred from the "
                         "network's input size")
        elif unknown:
            raise ImportRefused(f"{run_dir}: sizes of observation terms {[terms[i][0] for i in unknown]} are not "
                                "recorded; export IO descriptors (train.py --export_io_descriptors; or "
                                "--io-descriptors PATH) or give --sidecar")
        for (name, t), size in zip(terms, sizes):
            # the group's history_length, when set, overrides every term's (ObservationGroupCfg)
            group_hist = obs_cfg.get("history_length")
            hist = int(group_hist if group_hist is not None else (t.get("history_length") or 0))
            if _func_name(t.get("func")) == "last_action":
                last_action_terms.append(name)
            g = {"name": name, "size": int(size) * max(hist, 1)}
            if _TERM_SIZES.get(_func_name(t.get("func"))) == "J" and size == len(joint_names) and names_known \
                    and hist <= 1:
                g = {"name": name, "names": joint_names}
            if t.get("scale") is not None:
                sc = t["scale"]
                g["scale"] = sc if not isinstance(sc, list) or hist <= 1 else np.tile(sc, hist).tolist()
            if t.get("clip") is not None:
                g["clip"] = list(t["clip"])
            if hist > 1:
                notes.append(f"observation term {name!r} is a history of {hist} steps (Isaac Lab stacks oldest first)")
            observations.append(g)
        notes.append("observation terms read from params/env.yaml (no IO_descriptors.yaml)")
    if any("quat" in g["name"] for g in observations):
        notes.append("an observation term is a quaternion: Isaac Lab >= 3.0 orders it XYZW, earlier versions WXYZ; "
                     "set the order in the robot's observation config to the one this policy was trained with")
    notes.append(f"control period {period:g} s = sim.dt {dt:g} x decimation {decimation}")
    if last_action_terms:
        notes.append(f"observation {last_action_terms[0]!r} (last_action) is the network's raw output y, before the "
                     "action scale and offset: the policy node feeds y back (contract provenance last_action: raw)")
    return {"observations": observations, "actions": actions, "control_period_s": period,
            # ActionManager.action (what the last_action term reads) is the raw action the policy output
            "provenance": {"last_action": "raw", "isaaclab_action_term": act_name,
                           "isaaclab_io_descriptors": str(bool(io_obs)).lower()}}


def run_sidecar(run_dir: Path, n_obs: int, n_act: int, notes: list[str], io_descriptors: Path | None = None) -> Sidecar:
    """The parsed sidecar of an Isaac Lab run directory (:func:`isaaclab_sidecar`, validated)."""
    return parse_sidecar(isaaclab_sidecar(run_dir, n_obs, n_act, notes, io_descriptors), str(run_dir))


def run_provenance(run_dir: Path) -> dict[str, str]:
    """The run's name and, from params/agent.yaml when there, its experiment name (for the contract)."""
    prov = {"run_dir": run_dir.name}
    agent = run_dir / "params" / "agent.yaml"
    if agent.is_file():
        cfg = _yaml(agent, str(agent)) or {}
        if isinstance(cfg, dict):
            prov["agent_experiment"] = str(cfg.get("experiment_name", ""))
    return prov
