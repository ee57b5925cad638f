"""Before the robot moves: does the robot file feed the policy what it was trained on? (ROS-free, no torch.)

A policy that walks in simulation and shakes on the robot usually meets a mismatch nobody saw: joint
order, an observation scale applied twice or not at all, another default pose, the action scale
applied by both the artifact and the robot file, the meaning of ``last_action``, another control
period. :func:`check_deployment` compares, term by term, what the policy expects (its contract and,
where known, the training source's own config: a :class:`TrainingConfig`) with what the robot file
gives, and returns every row, not just the first problem (``lowrl check`` prints them as a table; the
policy node runs the same check at configure: see PolicySetup in core/runtime/policy_settings.py).

Each mismatch is *hard* or *soft*. Hard ones make the robot compute another observation or command
than training did (joint order or count, term order, a scale/offset/default pose/quaternion order/
last-action meaning that differs, an action transform applied twice, another control period than the
training's); the node refuses to configure on them by default (``deploy_check: refuse``). Soft ones
are risks the file may have reasons for (no joint limits on a position interface, a term timeout
shorter than the control period, the loop not timed at the contract's period); they are warned about.

Observation scales are compared end to end, per entry, as the affine map from the term's value to the
network's input: the robot file's ``(raw - offset) * scale`` followed by the artifact's
``(v - obs_offset) * obs_scale``, against the training source's map. The "expects" column is the
scale/offset the robot file must give for them to agree with this artifact (1 where the artifact
already applies the training scale, as an Isaac Lab import does).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from lowrl_ros.core.runtime.actions import ActionConfig, OutputConfig, SafetyConfig
from lowrl_ros.core.runtime.artifact import last_action_convention
from lowrl_ros.core.runtime.observation import ObservationSpec, TermSpec
from lowrl_ros.core.runtime.robot_file import RobotFile, RobotFileError, load_robot_file
from lowrl_ros.core.types import Level, StatusEntry

DEPLOY_CHECKS = ("refuse", "warn")
STATUS_NAME = "lowrl/policy/deploy_check"
_RTOL = 1e-6


@dataclass(frozen=True)
class TrainingConfig:
    """What the training source itself says (an Isaac Lab run dir, a lowrl training robot file).

    Attributes:
        source: where it was read (for the table).
        contract: the contract the source's own config gives (re-imported from the run directory), or None.
            Its obs_offset/obs_scale are the training map from each term's value to the network input.
        robot: the robot file the policy was trained with (lowrl's own envs build the observation from it).
        term_clips: per-term clips applied to the term's value in training (Isaac Lab clips before scaling).
        last_action: "raw" or "action" (None: unknown).
        quaternion_order: the orientation layout the training's quaternion terms used (None: unknown).
        default_pose: joint -> default position in training (Isaac Lab's default joint positions).
        relative_terms: names of the training terms that are joint positions relative to the default pose.
    """

    source: str
    contract: Any = None
    robot: RobotFile | None = None
    term_clips: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    last_action: str | None = None
    quaternion_order: str | None = None
    default_pose: Mapping[str, float] | None = None
    relative_terms: tuple[str, ...] = ()


def recorded_training(contract: Any, base: str | Path = ".") -> TrainingConfig | None:
    """The training robot file the contract's provenance names (``robot_file``: lowrl's own envs build their
    observation from it, e.g. models/legged_ant_int8.onnx from config/robots/legged_ant.yaml), resolved
    against ``base``; None when none is recorded or it is not on this machine (nothing to compare with)."""
    name = (getattr(contract, "provenance", None) or {}).get("robot_file")
    path = Path(base) / name if name else None
    if path is None or not path.is_file():
        return None
    try:
        robot = load_robot_file(path)
    except RobotFileError:
        return None  # the training file is not ours to validate; the robot's own file is checked
    return TrainingConfig(source=str(path), robot=robot)


@dataclass(frozen=True)
class CheckRow:
    """One line of the table: ``what`` the policy ``expects`` and the robot file ``gives``."""

    what: str
    expects: str
    gives: str
    ok: bool = True
    hard: bool = True
    why: str = ""  # what to change, for a mismatch

    @property
    def verdict(self) -> str:
        return "ok" if self.ok else ("MISMATCH" if self.hard else "WARN")


@dataclass(frozen=True)
class DeployReport:
    """Every row of a deploy check; :attr:`hard` and :attr:`soft` are the mismatches."""

    rows: tuple[CheckRow, ...]

    @property
    def hard(self) -> tuple[CheckRow, ...]:
        return tuple(r for r in self.rows if not r.ok and r.hard)

    @property
    def soft(self) -> tuple[CheckRow, ...]:
        return tuple(r for r in self.rows if not r.ok and not r.hard)

    @property
    def ok(self) -> bool:
        return not self.hard

    def table(self) -> str:
        """The term-by-term table (what the policy expects | what the robot file gives | ok/MISMATCH/WARN)."""
        head = ("check", "policy expects", "robot file gives", "")
        rows = [head] + [(r.what, r.expects, r.gives, r.verdict) for r in self.rows]
        widths = [min(max(len(row[i]) for row in rows), cap) for i, cap in enumerate((56, 40, 44))]
        lines = []
        for row in rows:
            cells = [c if len(c) <= w else c[:w - 3] + "..." for c, w in zip(row[:3], widths)]
            lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + row[3])
        lines.insert(1, "  ".join("-" * w for w in widths) + "  --------")
        return "\n".join(lines)

    def mismatches(self) -> list[str]:
        """One line per mismatch (hard first): what, expected, given and the fix."""
        return [f"{r.verdict} {r.what}: the policy expects {r.expects}, the robot file gives {r.gives}"
                + (f" ({r.why})" if r.why else "") for r in self.hard + self.soft]

    def status(self) -> StatusEntry:
        """The diagnostics entry: ERROR with hard mismatches, WARN with soft ones, else OK."""
        level = Level.ERROR if self.hard else Level.WARN if self.soft else Level.OK
        text = "; ".join(self.mismatches()) or f"robot file agrees with the policy ({len(self.rows)} checks)"
        return StatusEntry(STATUS_NAME, level, text, {"hard": str(len(self.hard)), "soft": str(len(self.soft))})


def _fmt(values: Any) -> str:
    """A short text for a number or a vector (one value when all entries agree)."""
    arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if arr.size and np.allclose(arr, arr[0], rtol=_RTOL, atol=1e-12):
        return f"{arr[0]:g}"
    shown = ", ".join(f"{v:g}" for v in arr[:4])
    return f"[{shown}{', ...' if arr.size > 4 else ''}]"


def _group(name: str) -> str:
    return name.split("[", 1)[0]


def _label(name: str) -> str:
    return name[name.index("[") + 1:-1] if "[" in name and name.endswith("]") else ""


def check_deployment(contract: Any, robot: RobotFile, *, training: TrainingConfig | None = None,
                     loop_period_s: float | None = None) -> DeployReport:
    """Compare the policy (``contract``, ``training``) with the ``robot`` file; every row, in table order.

    Args:
        contract: the deployed artifact's PolicyContract.
        robot: the parsed robot file.
        training: what the training source says, when known (``lowrl check --run-dir``).
        loop_period_s: the period the node's loop will run at (None: the contract's, robot_timing: contract).

    Raises:
        ValueError: the robot file cannot be parsed at all (the message says what to fix).
    """
    rows: list[CheckRow] = []
    spec = ObservationSpec.from_robot_file(robot, contract.control_period_s)
    names = list(contract.obs_names)
    rows.append(CheckRow("observation size", str(contract.obs_dim), str(spec.obs_dim), spec.obs_dim == contract.obs_dim,
                         why="add, remove or resize terms"))
    if training is not None and training.contract is not None:
        t_names = list(training.contract.obs_names)
        rows.append(CheckRow("observation names vs training", f"{len(t_names)} named entries",
                             f"{len(names)} in the artifact", t_names == names,
                             why="the artifact was not imported from this training run; re-import it"))
    rows += _term_rows(contract, spec, names, training)
    rows += _action_rows(contract, robot, training)
    rows += _last_action_rows(contract, spec, training)
    rows += _timing_rows(contract, spec, training, loop_period_s)
    return DeployReport(tuple(rows))


# ---- observation terms ---------------------------------------------------------------------------------------
def _term_rows(contract: Any, spec: ObservationSpec, names: list[str], training: TrainingConfig | None
               ) -> list[CheckRow]:
    rows: list[CheckRow] = []
    generic = all(_group(n).startswith("obs") and not _label(n) and n.replace("obs", "").strip("_").isdigit()
                  for n in names)
    start = 0
    t_robot = training.robot if training is not None else None
    t_spec = ObservationSpec.from_robot_file(t_robot, contract.control_period_s) if t_robot is not None else None
    for t in spec.terms:
        sl = names[start:start + t.dim]
        if not sl:
            break
        what = f"obs {t.index} {t.term}" + (f" '{t.name}'" if t.name != t.term else "")
        group = _group(sl[0])
        if not generic:
            same = all(n.lower().startswith(t.name.lower()) or (t.source == "joint_state" and
                       t.labels[(k % t.size)].lower() in n.lower()) for k, n in enumerate(sl))
            rows.append(CheckRow(f"{what}: order", f"'{group}' at entries {start}..{start + len(sl) - 1}",
                                 f"'{t.name}' ({t.dim} entries)", same and len(sl) == t.dim,
                                 why="put the terms in the policy's order or set the term's name: to the policy's"))
        labels = [_label(n) for n in sl[:t.size]]
        if t.source == "joint_state" and all(labels) and set(labels) == set(t.joints):
            rows.append(CheckRow(f"{what}: joint order", ", ".join(labels[:4]) + (", ..." if t.size > 4 else ""),
                                 ", ".join(t.joints[:4]) + (", ..." if t.size > 4 else ""), tuple(labels) == t.joints,
                                 why="list the joints in the policy's order"))
        if training is not None and training.contract is not None and t.dim == len(sl):
            rows += _affine_rows(what, t, spec, contract, training, start)
        if t_spec is not None:
            rows += _same_term_rows(what, t, t_spec)
        if t.term == "projected_gravity":
            want = training.quaternion_order if training is not None else None
            want = want or contract.provenance.get("quaternion_order")
            if t_spec is not None:
                want = want or next((u.quaternion_order for u in t_spec.terms if u.term == t.term), None)
            if want:
                rows.append(CheckRow(f"{what}: quaternion order", want, t.quaternion_order,
                                     t.quaternion_order == want, why=f"set quaternion_order: {want}"))
        start += t.dim
    return rows


def _affine_rows(what: str, t: TermSpec, spec: ObservationSpec, contract: Any, training: TrainingConfig,
                 start: int) -> list[CheckRow]:
    """Scale, offset and clip of one term, end to end against the training contract's map."""
    sl = slice(start, start + t.dim)
    c_off, c_sc = np.array(contract.obs_offset)[sl], np.array(contract.obs_scale)[sl]
    tc = training.contract
    t_off, t_sc = np.array(tc.obs_offset)[sl], np.array(tc.obs_scale)[sl]
    r_sc, r_off = np.tile(t.scale, t.history), np.tile(t.offset, t.history)
    group = _group(tc.obs_names[start])
    # The term's value in training is relative to the training default pose for a *_rel joint term.
    pose = dict(zip(spec.joints, spec.default_pose))
    labels = np.tile(t.labels, t.history) if t.source == "joint_state" else ()
    train_rel = group in training.relative_terms or (t.term == "joint_position" and group.endswith("_rel"))
    raw_shift_robot = np.array([pose.get(j, 0.0) for j in labels]) if t.relative else 0.0
    t_pose = training.default_pose or {}
    raw_shift_train = np.array([t_pose.get(j, 0.0) for j in labels]) if train_rel else 0.0
    want_scale = t_sc / c_sc  # what the robot file must multiply by, in front of this artifact
    # training: (raw - shift_T - t_off) * t_sc; robot: ((raw - shift_R - r_off) * r_sc - c_off) * c_sc, equal
    want_off = raw_shift_train - raw_shift_robot + t_off - c_off / want_scale
    rows = [CheckRow(f"{what}: scale", _fmt(want_scale), _fmt(r_sc), bool(np.allclose(r_sc, want_scale, rtol=1e-5)),
                     why=_scale_why(r_sc, want_scale))]
    if t.term == "joint_position" and train_rel != t.relative:
        rows.append(CheckRow(f"{what}: relative", str(train_rel).lower(), str(t.relative).lower(), False,
                             why=f"training reads '{group}' {'relative to' if train_rel else 'not relative to'} the "
                                 "default pose; set relative accordingly"))
    else:
        rows.append(CheckRow(f"{what}: offset", _fmt(want_off), _fmt(r_off),
                             bool(np.allclose(r_off, want_off, rtol=1e-5, atol=1e-6)),
                             why="the offset is applied twice or missing (a relative term already subtracts the "
                                 "default pose)"))
    clip = training.term_clips.get(group)
    if clip is not None:
        rows.append(CheckRow(f"{what}: clip", f"[{clip[0]:g}, {clip[1]:g}]",
                             "none" if t.clip is None else f"[{t.clip[0]:g}, {t.clip[1]:g}]",
                             t.clip is not None and np.allclose(t.clip, clip), hard=False,
                             why=f"the artifact does not clip single terms: set clip: [{clip[0]:g}, {clip[1]:g}]"))
    return rows


def _scale_why(given: np.ndarray, want: np.ndarray) -> str:
    ratio = given / want
    if np.allclose(given, 1.0) and not np.allclose(want, 1.0):
        return f"missing scale: set scale: {_fmt(want)} (this artifact does not apply it)"
    if np.allclose(want, 1.0):
        return f"the artifact already applies the training scale: remove scale {_fmt(given)} (applied twice)"
    return f"the robot file scales {_fmt(ratio)} times the training's; set scale: {_fmt(want)}"


def _same_term_rows(what: str, t: TermSpec, t_spec: ObservationSpec) -> list[CheckRow]:
    """One term against the training robot file's term at the same place (lowrl's own envs)."""
    u = next((x for x in t_spec.terms if x.index == t.index), None)
    if u is None or u.term != t.term:
        return [CheckRow(f"{what}: training term", u.term if u else "none", t.term, False,
                         why="the terms differ from the training robot file's")]
    rows = []
    for key, want, got in (("scale", u.scale, t.scale), ("offset", u.offset, t.offset)):
        rows.append(CheckRow(f"{what}: {key}", _fmt(want), _fmt(got), bool(np.allclose(want, got, rtol=1e-6)),
                             why=f"training used {key} {_fmt(want)}"))
    for key in ("clip", "relative", "function", "history", "history_order", "joints"):
        want, got = getattr(u, key), getattr(t, key)
        if want != got:
            rows.append(CheckRow(f"{what}: {key}", str(want), str(got), False, why=f"training used {key} {want}"))
    return rows


# ---- actions ------------------------------------------------------------------------------------------------
def _action_rows(contract: Any, robot: RobotFile, training: TrainingConfig | None) -> list[CheckRow]:
    rows: list[CheckRow] = []
    joints, action_names = tuple(robot.joints), tuple(contract.action_names)
    n = contract.action_dim
    # The order is checkable only where the policy names its actions by joint (Isaac Lab, rsl_rl imports, our
    # legged kits); "torque", "u" or "action_0" name no joint, so the robot file's order is the only one there is.
    named = bool(set(action_names) & set(joints))
    if joints:
        rows.append(CheckRow("action count", str(n), f"{len(joints)} joints", len(joints) == n,
                             why="list one joint per action, in the policy's order"))
    if joints and named:
        rows.append(CheckRow("action joint order", _names(action_names), _names(joints), joints == action_names,
                             why="list joints in the policy's action order"))
    elif joints:
        rows.append(CheckRow("action joint order", "(the policy's actions name no joint)", _names(joints), True,
                             why="not checkable: the robot file's joint order is taken as the policy's"))
    if training is not None and training.contract is not None:
        t_names = tuple(training.contract.action_names)
        rows.append(CheckRow("action joints vs training", _names(t_names), _names(action_names),
                             t_names == action_names, why="the artifact's action order is not the training's"))
    has_output = any(k in robot.raw for k in ("interface", "action", "output", "safety"))
    if not has_output or not joints:
        return rows
    interface = robot.raw.get("interface", "position")
    action = ActionConfig.from_dict(robot.raw.get("action"))
    output = OutputConfig.from_dict(robot.raw.get("output"), interface)
    safety = SafetyConfig.from_dict(robot.raw.get("safety"), interface)
    pose = np.array(robot.default_pose) if robot.default_pose else None
    r_scale = np.full(n, 1.0) if action.scale is None else np.broadcast_to(np.asarray(action.scale, float), (n,))
    if action.offset == "default_pose":
        r_off = pose if pose is not None else np.zeros(n)
    else:
        r_off = np.broadcast_to(np.asarray(0.0 if action.offset is None else action.offset, float), (n,))
    c_scale = np.ones(n) if contract.action_scale is None else np.asarray(contract.action_scale, float)
    c_off = np.zeros(n) if contract.action_offset is None else np.asarray(contract.action_offset, float)
    robot_id = bool(np.all(r_scale == 1) and np.all(r_off == 0))
    art_id = bool(np.all(c_scale == 1) and np.all(c_off == 0))
    rows.append(CheckRow("action scale/offset applied once", "artifact or robot file, not both",
                         f"artifact {'-' if art_id else _fmt(c_scale) + '/' + _fmt(c_off)}, "
                         f"robot file {'-' if robot_id else _fmt(r_scale) + '/' + _fmt(r_off)}",
                         robot_id or art_id, why="remove scale and offset from the robot file's action section"))
    if training is not None and training.contract is not None and len(training.contract.action_names) == n:
        tc = training.contract
        t_scale = np.ones(n) if tc.action_scale is None else np.asarray(tc.action_scale, float)
        t_off = np.zeros(n) if tc.action_offset is None else np.asarray(tc.action_offset, float)
        # target = r_off + r_scale * (c_off + c_scale * y) against training's t_off + t_scale * y
        scale, off = r_scale * c_scale, r_off + r_scale * c_off
        rows.append(CheckRow("action scale (end to end)", _fmt(t_scale), _fmt(scale),
                             bool(np.allclose(scale, t_scale, rtol=1e-6)),
                             why="the action scale is applied twice or not at all"))
        rows.append(CheckRow("action offset (end to end)", _fmt(t_off), _fmt(off),
                             bool(np.allclose(off, t_off, rtol=1e-6, atol=1e-9)),
                             why="the offset (default pose) is applied twice or not at all"))
    if training is not None and training.default_pose and pose is not None:
        want = np.array([training.default_pose.get(j, np.nan) for j in joints])
        known = np.isfinite(want)
        rows.append(CheckRow("default pose", _fmt(want), _fmt(pose),
                             bool(np.allclose(pose[known], want[known], atol=1e-6)),
                             why="default_pose must be the training's default joint positions, in the joints' order"))
    controller = list(output.joints or joints)
    unknown = [j for j in controller if j not in joints]
    missing = [j for j in joints if j not in controller]
    twice = sorted({j for j in controller if controller.count(j) > 1})
    wrong = "; ".join(part for part in (
        f"output.joints names {', '.join(repr(j) for j in unknown)}, not a policy joint" if unknown else "",
        f"lacks {', '.join(repr(j) for j in missing)}" if missing else "",
        f"lists {', '.join(repr(j) for j in twice)} twice" if twice else "") if part)
    rows.append(CheckRow("controller joints", "every policy joint once, by name",
                         wrong or ("output.joints" if output.joints else "the policy's order (no output.joints)"),
                         not wrong, hard=True,
                         why="list every policy joint once in output.joints (the controller's order)"))
    if interface == "position":
        limited = action.lower is not None
        rows.append(CheckRow("joint limits", "given (position interface)", "given" if limited else "none", limited,
                             hard=False, why="add action.limits (the robot's joint limits, policy order)"))
        if limited and pose is not None:
            lo, hi = np.asarray(action.lower), np.asarray(action.upper)
            inside = bool(np.all((pose >= lo) & (pose <= hi)))
            rows.append(CheckRow("default pose within limits", "lower <= pose <= upper", "inside" if inside else
                                 "outside for " + ", ".join(j for j, p, a, b in zip(joints, pose, lo, hi)
                                                            if not a <= p <= b), inside,
                                 why="fix default_pose or action.limits"))
    safe_ok = not (interface == "position" and safety.safe_action == "zero")
    rows.append(CheckRow("safe action", "hold or default_pose" if interface == "position" else "zero",
                         f"{safety.safe_action} ({interface})", safe_ok,
                         why="a position-controlled joint is never sent to 0 rad"))
    return rows


def _names(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f", ... ({len(names)})" if len(names) > 3 else "")


# ---- last action and timing -------------------------------------------------------------------------------------
def _last_action_rows(contract: Any, spec: ObservationSpec, training: TrainingConfig | None) -> list[CheckRow]:
    rows = []
    for t in spec.terms:
        if t.source != "action":
            continue
        recorded = last_action_convention(contract)
        want = training.last_action if training is not None and training.last_action else recorded
        got = t.convention or recorded
        where = "robot file convention" if t.convention else "the contract's provenance last_action"
        rows.append(CheckRow(f"obs {t.index} last_action: convention", want, f"{got} ({where})", got == want,
                             why=f"the training fed back the {'raw network output' if want == 'raw' else 'action'}; "
                                 f"set {{term: last_action, convention: {want}}} or re-import the policy"))
    return rows


def _timing_rows(contract: Any, spec: ObservationSpec, training: TrainingConfig | None,
                 loop_period_s: float | None) -> list[CheckRow]:
    period = float(contract.control_period_s)
    rows = []
    if training is not None and training.contract is not None:
        t_period = float(training.contract.control_period_s)
        rows.append(CheckRow("control period vs training", f"{t_period:g} s", f"{period:g} s (artifact)",
                             abs(t_period - period) <= 1e-9 * max(t_period, 1.0),
                             why=f"re-import with --control-period {t_period:g} (or without overriding it)"))
    loop = period if loop_period_s is None else float(loop_period_s)
    rows.append(CheckRow("control loop period", f"{period:g} s", f"{loop:g} s", abs(loop - period) <= 1e-9,
                         hard=False, why="set robot_timing: contract"))
    short = [t.describe() for t in spec.terms if t.topic and t.timeout_s < period]
    rows.append(CheckRow("sensor timeouts", f">= {period:g} s (one period)",
                         "shorter: " + "; ".join(short) if short else "all >= one period", not short, hard=False,
                         why="a term that times out within one period goes stale between ticks"))
    return rows
