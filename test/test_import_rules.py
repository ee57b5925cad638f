"""The import rules of docs/architecture.md, enforced: the one home of every "imports no torch" guard.

Two kinds of check:
- dynamic: a package is imported (and exercised: an artifact is run, a log is written) in a fresh
  interpreter, and modules that must stay out of its process (torch: ~230 MB resident on its own;
  gymnasium, mujoco, matplotlib; rclpy for core) are looked up in ``sys.modules``. A twin case runs
  the same check on a module that does import torch and expects it to fail.
- static: every module's imports (function-level included) are parsed; the dependency table holds,
  there are no cycles, and no node imports another node's private names.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lowrl_ros"
HEAVY = ("torch", "gymnasium", "mujoco", "matplotlib")
ROBOT_FORBIDDEN = HEAVY + ("rclpy",)

# Runs a tiny int8 artifact through the engines, so lazily imported engine code is covered too.
RUN_ARTIFACT = """
import numpy as np, tempfile, os
from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
from lowrl_ros.core.runtime.engines import load_artifact
w = MlpWeights([(np.ones((4, 3), np.float32), np.zeros(4, np.float32)),
                (np.ones((1, 4), np.float32), np.zeros(1, np.float32))])
c = PolicyContract(['a', 'b', 'c'], ['u'], [-1], [1])
p = save_artifact(os.path.join(tempfile.mkdtemp(), 'g.onnx'), w, c, int8=True)
for engine in ('ort', 'numpy', 'auto'):
    load_artifact(p, engine).act(np.zeros(3))
"""
WRITE_LOG = """
import numpy as np, tempfile
import lowrl_ros.core.finetune.transition_log as t
d = tempfile.mkdtemp(); w = t.TransitionLogWriter(d)
w.append(t.Transition(np.zeros(2), np.zeros(1), 0.0, np.zeros(2), False, False, 1, 0.0)); w.close()
t.read_log(d)
"""
# The episode rule, the version tracker, the wire rows and the learn gate, run (the recorder and the gate use them).
JUDGE = """
import lowrl_ros.core.finetune.versions as v, lowrl_ros.core.finetune.wire as wire, lowrl_ros.core.finetune.status as s
tr = t.Transition(np.zeros(2), np.zeros(1), -1.0, np.zeros(2), False, True, 1, 0.0)
j = v.EpisodeJudge(); assert j.add(0, tr) == (1, -1.0)
wire.decode_transitions(wire.encode_transitions([tr], 0), 2, 1)
k = v.VersionTracker(1, 10.0); k.add(v.VersionRecord(1, None, 'a.onnx')); k.on_episode(1, -1.0)
s.finetune_status(s.FineTuneFacts(state=s.learn_gate(s.LearnGate(), '', True)))
"""
# `lowrl import` of a plain ONNX MLP with its sidecar: the graph walk and the contract need no torch.
IMPORT_ONNX = """
import numpy as np, tempfile, onnx, pathlib
from lowrl_ros.core.runtime.artifact import MlpWeights, PolicyContract, save_artifact
from lowrl_ros.core.importers.registry import ImportOptions, load_source
w = MlpWeights([(np.ones((4, 3), np.float32), np.zeros(4, np.float32)),
                (np.ones((1, 4), np.float32), np.zeros(1, np.float32))])
src = pathlib.Path(tempfile.mkdtemp()) / 'plain.onnx'
m = onnx.load(str(save_artifact(src, w, PolicyContract(['a', 'b', 'c'], ['u'], [-1], [1]))))
del m.metadata_props[:]; onnx.save(m, str(src))  # a plain ONNX, not a lowrl artifact
src.with_suffix('.yaml').write_text('observations: [a, b, c]\\nactions: [u]\\n')
assert load_source(src, None, ImportOptions()).contract.obs_names == ('a', 'b', 'c')
"""

# (case id, modules imported, code run after the imports, modules that must stay out of sys.modules)
CASES = [
    ("runtime", ["lowrl_ros.core.runtime." + m for m in
                 ("artifact", "engines", "onnx_graph", "bundle", "tiers", "policy_stats", "control", "obs_adapter",
                  "swap", "status")] + ["lowrl_ros.core.types"],
     RUN_ARTIFACT, ROBOT_FORBIDDEN),
    ("budget", ["lowrl_ros.core.budget.monitor", "lowrl_ros.core.budget.probes", "lowrl_ros.core.budget.profile"],
     "", ROBOT_FORBIDDEN),
    ("stream", ["lowrl_ros.core.stream.protocol", "lowrl_ros.core.stream.receiver"], "", ROBOT_FORBIDDEN),
    ("finetune, torch-free", ["lowrl_ros.core.finetune." + m for m in ("transition_log", "versions", "wire", "status",
                                                                         "config", "rewards", "demos")],
     WRITE_LOG + JUDGE, ROBOT_FORBIDDEN),
    ("monitor", ["lowrl_ros.core.monitor.model"], "", ROBOT_FORBIDDEN),
    # The session's writers run in the nodes; the report draws with matplotlib only when called.
    ("session", ["lowrl_ros.core.session." + m for m in ("files", "analysis", "report", "recording")], "",
     ROBOT_FORBIDDEN),
    ("ros.policy_node", ["lowrl_ros.ros.policy_node"], RUN_ARTIFACT, HEAVY + ("lowrl_ros.core.sim",)),  # sim: off-board
    ("ros.budget_monitor_node", ["lowrl_ros.ros.budget_monitor_node"], "", HEAVY),
    # Off-board modules that run where torch may be absent (numpy-only int8 actors, gates, export).
    ("torch-free off-board", ["lowrl_ros.core.compress.quantize", "lowrl_ros.core.compress.release",
                              "lowrl_ros.core.compress.export_c", "lowrl_ros.core.sim.evaluate",
                              "lowrl_ros.core.train.actorq_worker", "lowrl_ros.commands.eval",
                              "lowrl_ros.commands.profile", "lowrl_ros.commands.export_c",
                              "lowrl_ros.core.sim.robot_sim", "lowrl_ros.core.sim.robot_env",
                              "lowrl_ros.core.finetune.sim_env"], "", ("torch",)),
    ("importers, torch-free", ["lowrl_ros.core.importers." + m for m in ("registry", "contract", "onnx", "isaaclab")]
     + ["lowrl_ros.commands.import_policy"], IMPORT_ONNX, ("torch",)),
]


def leaked(modules: list[str], code: str, forbidden: tuple[str, ...]) -> list[str]:
    """Import ``modules`` and run ``code`` in a fresh interpreter; return the forbidden modules it loaded."""
    script = "import sys, json\n" + "".join(f"import {m}\n" for m in modules) + code + (
        f"\nprint(json.dumps(sorted(m for m in {list(forbidden)!r} if m in sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_package_keeps_heavy_modules_out(case):
    _, modules, code, forbidden = case
    assert leaked(modules, code, forbidden) == []


def test_the_guard_fails_when_something_imports_torch():
    """The twin: the same check sees torch when a module pulls it in (compress.distill does, on purpose)."""
    assert "torch" in leaked(["lowrl_ros.core.compress.distill"], "", ("torch",))


def test_no_core_module_imports_rclpy():
    modules = sorted(name for name in module_files() if name.startswith("lowrl_ros.core"))
    assert len(modules) > 40
    assert leaked(modules, "", ("rclpy", "std_msgs", "sensor_msgs", "diagnostic_msgs")) == []


# ------------------------------------------------------------------------------------------ static

# Which project packages each core sub-package may import (docs/architecture.md, "Import rules").
CORE_ALLOWED = {
    "types": set(), "config": set(),
    "runtime": {"types", "config"},
    "budget": {"types", "config", "runtime"},
    "stream": {"types", "config", "runtime"},
    "train": {"types", "config", "runtime"},
    "sim": {"types", "config", "runtime"},
    "finetune": {"types", "config", "runtime", "train", "sim"},  # sim: off-board identification (offboard_sysid)
    "compress": {"types", "config", "runtime", "train", "sim", "importers"},  # importers: the SB3 teacher
    "importers": {"runtime"},
    "session": {"config", "runtime", "finetune", "sim"},  # finetune: the learner states, the episode log; sim: the Agg
    # pyplot; config: the monitor's parameters (core/session/recording.py MonitorConfig)
    "monitor": {"types", "runtime"},  # the views' model: stats fields, the step-row header, tier names
    "retrain": {"config", "runtime", "train", "sim", "finetune", "compress", "importers"},  # PPO + gates
}
LAYER_ALLOWED = {  # lowrl_ros.<layer> may import these (launcher: the fallback launcher, beside ros)
    "ros": {"core", "ros"},
    "commands": {"core", "ros", "launcher", "commands"},
    "rqt": {"core", "ros", "rqt"},  # the rqt plugin: a view over the monitor model and its ROS listener
}


def module_files(root: Path = PKG) -> dict[str, Path]:
    mods = {}
    for p in root.rglob("*.py"):
        name = ".".join(p.relative_to(root.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def project_imports(name: str, path: Path, mods: dict[str, Path]) -> list[tuple[str, str]]:
    """(imported module, imported name or '') for every project import of a module, function-level included."""
    out = []
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                parts = parts[: len(parts) - node.level + (1 if is_pkg else 0)]
                base = ".".join(parts + ([base] if base else []))
            if not base.startswith("lowrl_ros"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub, "") if sub in mods else (base, alias.name))
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.startswith("lowrl_ros")]
    return out


def rule_violations(root: Path = PKG) -> list[str]:
    mods = module_files(root)
    problems, edges = [], {}
    for name, path in mods.items():
        parts = name.split(".")
        deps = set()
        for target, imported in project_imports(name, path, mods):
            tparts = target.split(".")
            deps.add(target)
            if len(parts) > 2 and parts[1] == "core" and len(tparts) > 1:
                if tparts[1] != "core":
                    problems.append(f"{name} (core) imports {target}, a layer above core")
                elif len(parts) > 2 and len(tparts) > 2 and parts[2] in CORE_ALLOWED and tparts[2] != parts[2]:
                    if tparts[2] not in CORE_ALLOWED[parts[2]]:
                        problems.append(f"{name} imports {target}: core.{parts[2]} may import only "
                                        f"{sorted(CORE_ALLOWED[parts[2]]) or 'nothing from the project'}")
            elif len(parts) > 1 and parts[1] in LAYER_ALLOWED and len(tparts) > 1:
                if tparts[1] not in LAYER_ALLOWED[parts[1]]:
                    problems.append(f"{name} imports {target}, a layer above {parts[1]}")
            if imported.startswith("_") and len(tparts) > 2 and tparts[1] == "ros" and target != name:
                problems.append(f"{name} imports private {imported} from {target}")
        edges[name] = {d for d in deps if d in mods and d != name}
    problems = list(dict.fromkeys(problems))
    problems += [f"import cycle: {' -> '.join(c)}" for c in cycles(edges)]
    return problems


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Cycles between modules, ignoring a package's edges to and from its own sub-modules."""
    def own(a: str, b: str) -> bool:
        return a.startswith(b + ".") or b.startswith(a + ".")
    graph = {v: {w for w in ws if not own(v, w)} for v, ws in edges.items()}
    found, state = [], {}

    def visit(v: str, path: list[str]) -> None:
        state[v] = 1
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                found.append(path[path.index(w):] + [w])
            elif w not in state:
                visit(w, path + [w])
        state[v] = 2
    for v in sorted(graph):
        if v not in state:
            visit(v, [v])
    return found


def test_the_import_rules_hold():
    assert len(module_files()) > 80
    assert rule_violations() == []


def test_the_static_rules_can_fail(tmp_path):
    """The twin of the static check: a tree that breaks each rule once is caught on each."""
    pkg = tmp_path / "lowrl_ros"
    files = {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/runtime/__init__.py": "",
        "core/runtime/a.py": "from lowrl_ros.core.train import t\n",          # runtime -> train
        "core/train/__init__.py": "",
        "core/train/t.py": "def f():\n    from lowrl_ros.core.train import u\n",
        "core/train/u.py": "from lowrl_ros.core.train import t\nimport lowrl_ros.ros.x\n",  # cycle; core -> ros
        "ros/__init__.py": "",
        "ros/x.py": "from lowrl_ros.ros.y import _secret\n",                  # private cross-node name
        "ros/y.py": "_secret = 1\nfrom lowrl_ros.commands import c\n",           # ros -> commands
        "commands/__init__.py": "",
        "commands/c.py": "",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    found = "\n".join(rule_violations(pkg))
    assert "lowrl_ros.core.runtime.a imports lowrl_ros.core.train.t" in found
    assert "lowrl_ros.core.train.u (core) imports lowrl_ros.ros.x" in found
    assert "import cycle: lowrl_ros.core.train.t -> lowrl_ros.core.train.u -> lowrl_ros.core.train.t" in found
    assert "lowrl_ros.ros.x imports private _secret from lowrl_ros.ros.y" in found
    assert "lowrl_ros.ros.y imports lowrl_ros.commands.c, a layer above ros" in found
