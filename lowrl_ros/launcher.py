"""Run a ROS 2 YAML launch file where ROS 2's launch is not installed (the subset this package uses).

Supported, with ROS 2's meaning (launch_yaml / launch_ros):

- top level ``launch:`` list;
- ``arg``: ``name``, ``default``, ``description``; overridden by ``name:=value`` on the command line;
- ``node``: ``pkg``, ``exec``, ``name``, ``namespace``, ``output``, ``param`` (a list of ``from: FILE``
  and ``name:``/``value:`` entries), ``remap`` (a list of ``from:``/``to:``), ``args``, and the
  conditions ``if`` / ``unless`` (true/false/1/0, as launch's IfCondition);
- substitutions ``$(var NAME)``, ``$(find-pkg-share PKG)``, and ``$(equals A B)`` / ``$(not-equals A B)``
  (launch's EqualsSubstitution, Iron and later: "true"/"false"), nested innermost first with quoted
  arguments, e.g. ``if: $(not-equals '$(var record)' '')``.

Anything else is an error that names the key, so a launch file never half-runs. Each node is one
process (``--ros-args -r __node:=NAME -r __ns:=NS --params-file FILE -p k:=v -r from:=to``), its
output goes to ``<log dir>/<name>.log`` and, prefixed with ``[name]``, to the console. Ctrl-C or
SIGTERM sends SIGINT to every node, waits, then escalates to SIGTERM and SIGKILL. A node that exits
on its own shuts the rest down, and the launcher then exits non-zero.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

import yaml

PACKAGE = "lowrl_ros"
TOP_KEYS = {"arg", "node"}
ARG_KEYS = {"name", "default", "description"}
NODE_KEYS = {"pkg", "exec", "name", "namespace", "param", "remap", "output", "args", "if", "unless"}
_SUBST = re.compile(r"\$\(([^()]*)\)")  # an innermost substitution: resolved first, then its outer one
# A ROS namespace: parts of letters, digits and _, none starting with a digit (rcl's rule; "" = none).
_NAMESPACE = re.compile(r"^/?([A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*/?)?$")


class LaunchError(ValueError):
    """A launch file this launcher cannot run; the message names the problem and the fix."""


@dataclass
class NodeSpec:
    """One node to run: everything needed for its command line."""

    pkg: str
    executable: str
    name: str
    namespace: str = ""
    params_files: list[str] = field(default_factory=list)
    params: list[tuple[str, str]] = field(default_factory=list)
    remaps: list[tuple[str, str]] = field(default_factory=list)
    args: list[str] = field(default_factory=list)

    def ros_args(self) -> list[str]:
        out = ["--ros-args", "-r", f"__node:={self.name}"]
        if self.namespace:
            out += ["-r", f"__ns:=/{self.namespace.strip('/')}"]
        for f in self.params_files:
            out += ["--params-file", f]
        for k, v in self.params:
            out += ["-p", f"{k}:={v if v != '' else chr(34) * 2}"]  # empty string as YAML ""
        for a, b in self.remaps:
            out += ["-r", f"{a}:={b}"]
        return out


def package_share(pkg: str) -> Path:
    """$(find-pkg-share PKG): an installed share dir (colcon/pip), else this source tree."""
    candidates = [Path(p) / "share" / pkg for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    candidates.append(Path(sys.prefix) / "share" / pkg)
    if pkg == PACKAGE:
        candidates.append(Path(__file__).resolve().parent.parent)  # source tree / editable install
    for c in candidates:
        if (c / "package.xml").is_file():
            return c
    raise LaunchError(f"$(find-pkg-share {pkg}): package {pkg!r} not found (looked in "
                      f"{', '.join(map(str, candidates))}); install it or source its workspace")


def substitute(text, variables: dict[str, str], where: str) -> str:
    """Resolve ``$(var X)`` and ``$(find-pkg-share P)`` in ``text``."""
    if not isinstance(text, str):
        return text

    def one(match: re.Match) -> str:
        try:
            parts = shlex.split(match.group(1))
        except ValueError as exc:
            raise LaunchError(f"{where}: $({match.group(1)}): {exc}") from None
        if len(parts) == 2 and parts[0] == "var":
            if parts[1] not in variables:
                raise LaunchError(f"{where}: $(var {parts[1]}) is not a declared arg; add "
                                  f"'- arg: {{name: {parts[1]}, default: ...}}' before it")
            return variables[parts[1]]
        if len(parts) == 2 and parts[0] == "find-pkg-share":
            return str(package_share(parts[1]))
        if len(parts) == 3 and parts[0] in ("equals", "not-equals"):
            return str((parts[1] == parts[2]) == (parts[0] == "equals")).lower()
        raise LaunchError(f"{where}: substitution $({match.group(1)}) is not supported by lowrl launch "
                          "(only $(var NAME), $(find-pkg-share PKG), $(equals A B), $(not-equals A B)); "
                          "use ros2 launch for it")

    for _ in range(16):  # innermost first; a value is not expected to hold "$(" itself
        text, n = _SUBST.subn(one, text)
        if n == 0:
            break
    return text


def _condition(text: str, where: str) -> bool:
    """launch's IfCondition: 'true'/'1' or 'false'/'0' (any case); anything else is an error."""
    value = text.strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise LaunchError(f"{where}: a condition must be true, false, 1 or 0, got {text!r}")


def _check_keys(entry: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise LaunchError(f"{where}: unsupported key(s) {', '.join(unknown)}; lowrl launch supports "
                          f"{', '.join(sorted(allowed))} here (use ros2 launch for the rest)")


def parse_launch(path: str | Path, overrides: dict[str, str] | None = None) -> list[NodeSpec]:
    """Read a launch file into node specs, resolving args and substitutions."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LaunchError(f"{path}: cannot read the launch file ({exc})") from None
    if not isinstance(doc, dict) or set(doc) != {"launch"} or not isinstance(doc["launch"], list):
        raise LaunchError(f"{path}: a YAML launch file is one top-level 'launch:' list")
    overrides = dict(overrides or {})
    variables: dict[str, str] = {}
    nodes: list[NodeSpec] = []
    for i, item in enumerate(doc["launch"]):
        where = f"{path}: launch[{i}]"
        if not isinstance(item, dict) or len(item) != 1:
            raise LaunchError(f"{where}: each entry is one mapping like '- node: {{...}}'")
        (kind, body), = item.items()
        if kind not in TOP_KEYS:
            raise LaunchError(f"{where}: unsupported key {kind!r}; lowrl launch supports "
                              f"{', '.join(sorted(TOP_KEYS))} (use ros2 launch for the rest)")
        if not isinstance(body, dict):
            raise LaunchError(f"{where}: '{kind}' needs a mapping")
        if kind == "arg":
            _check_keys(body, ARG_KEYS, f"{where} (arg)")
            if "name" not in body:
                raise LaunchError(f"{where}: arg needs a name")
            name = str(body["name"])
            if name in overrides:
                variables[name] = overrides.pop(name)
            elif "default" in body:
                variables[name] = substitute(str(body["default"]), variables, where)
            else:
                raise LaunchError(f"{path}: arg {name!r} has no default; pass it as {name}:=VALUE")
            continue
        _check_keys(body, NODE_KEYS, f"{where} (node)")
        sub = lambda v: substitute(str(v), variables, where)  # noqa: E731
        if "if" in body and not _condition(sub(body["if"]), f"{where} (if)"):
            continue
        if "unless" in body and _condition(sub(body["unless"]), f"{where} (unless)"):
            continue
        for key in ("pkg", "exec"):
            if key not in body:
                raise LaunchError(f"{where}: node needs '{key}'")
        spec = NodeSpec(pkg=sub(body["pkg"]), executable=sub(body["exec"]),
                        name=sub(body.get("name", body["exec"])), namespace=sub(body.get("namespace", "")))
        if not _NAMESPACE.match(spec.namespace) or "//" in spec.namespace:
            raise LaunchError(f"{where}: namespace {spec.namespace!r} is not a ROS namespace; use parts of letters, "
                              "digits and _ separated by /, each starting with a letter or _ (e.g. r1 or fleet/r1)")
        for j, param in enumerate(body.get("param") or []):
            if isinstance(param, dict) and set(param) == {"from"}:
                spec.params_files.append(sub(param["from"]))
            elif isinstance(param, dict) and set(param) == {"name", "value"}:
                value = param["value"]
                text = sub(value) if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
                spec.params.append((sub(param["name"]), text.removesuffix("\n...")))
            else:
                raise LaunchError(f"{where}: param[{j}] must be {{from: FILE}} or {{name: N, value: V}}, got {param!r}")
        for j, remap in enumerate(body.get("remap") or []):
            if not (isinstance(remap, dict) and set(remap) == {"from", "to"}):
                raise LaunchError(f"{where}: remap[{j}] must be {{from: TOPIC, to: TOPIC}}, got {remap!r}")
            spec.remaps.append((sub(remap["from"]), sub(remap["to"])))
        if "args" in body:
            spec.args = sub(body["args"]).split()
        nodes.append(spec)
    if overrides:
        raise LaunchError(f"{path}: unknown launch argument(s) {', '.join(overrides)}; the file declares "
                          f"{', '.join(variables) or 'none'}")
    names = [n.namespace.strip("/") + "/" + n.name for n in nodes]
    if len(set(names)) != len(names):
        raise LaunchError(f"{path}: two nodes share a name; give each a different 'name'")
    return nodes


def node_command(spec: NodeSpec) -> list[str]:
    """The command line of a node: its console script from this environment, or ``python -m``."""
    script = Path(sys.executable).parent / spec.executable
    if script.is_file():
        base = [str(script)]
    elif spec.pkg == PACKAGE:
        base = [sys.executable, "-m", f"{PACKAGE}.ros.{spec.executable}"]
    else:
        found = shutil.which(spec.executable)
        if not found:
            raise LaunchError(f"node {spec.name}: executable {spec.executable!r} of package {spec.pkg!r} not found; "
                              "install the package or use ros2 launch")
        base = [found]
    return base + spec.args + spec.ros_args()


def default_log_dir() -> Path:
    root = Path(os.environ.get("ROS_LOG_DIR") or Path(os.environ.get("ROS_HOME", Path.home() / ".ros")) / "log")
    return root / f"lowrl_launch_{_dt.datetime.now().strftime('%Y-%m-%d-%H-%M-%S-%f')}"


class Launcher:
    """Start the nodes, stream their output, and stop them cleanly."""

    def __init__(self, nodes: list[NodeSpec], log_dir: Path | None = None, console: TextIO | None = sys.stdout,
                 grace_s: float = 10.0) -> None:
        self.nodes = nodes
        self.log_dir = Path(log_dir) if log_dir else default_log_dir()
        self.console = console
        self.grace_s = grace_s
        self.procs: dict[str, subprocess.Popen] = {}
        self._threads: list[threading.Thread] = []
        self._print_lock = threading.Lock()
        self.line_hooks: list[Callable[[str, str], None]] = []  # (node name, line), e.g. the demo's parser

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        commands = {spec.name: node_command(spec) for spec in self.nodes}  # fail before starting any
        for spec in self.nodes:
            # LOWRL_LAUNCHER_PID: a node whose launcher is killed stops too (ros/spinning.exit_with_launcher).
            env = dict(os.environ, PYTHONUNBUFFERED="1", RCUTILS_COLORIZED_OUTPUT="0",
                       LOWRL_LAUNCHER_PID=str(os.getpid()))
            # Own process group: a terminal's Ctrl-C reaches the launcher only, which then stops
            # the nodes in order instead of all of them dying at once mid-message.
            proc = subprocess.Popen(commands[spec.name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True, text=True, bufsize=1)
            self.procs[spec.name] = proc
            self._say(spec.name, f"started pid {proc.pid}: {' '.join(commands[spec.name])}")
            t = threading.Thread(target=self._pump, args=(spec.name, proc), daemon=True)
            t.start()
            self._threads.append(t)

    def _say(self, name: str, line: str) -> None:
        if self.console is not None:
            with self._print_lock:
                print(f"[{name}] {line}", file=self.console, flush=True)

    def _pump(self, name: str, proc: subprocess.Popen) -> None:
        with open(self.log_dir / f"{name}.log", "w") as log:
            for line in proc.stdout:
                line = line.rstrip("\n")
                log.write(line + "\n")
                log.flush()
                self._say(name, line)
                for hook in self.line_hooks:
                    hook(name, line)

    def exited(self) -> dict[str, int]:
        """Nodes that have exited, with their exit codes."""
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def shutdown(self) -> dict[str, int]:
        """SIGINT every node, wait ``grace_s``, then SIGTERM, then SIGKILL; return the exit codes."""
        for sig, wait in ((signal.SIGINT, self.grace_s), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            alive = [(n, p) for n, p in self.procs.items() if p.poll() is None]
            if not alive:
                break
            if sig != signal.SIGINT:
                self._say("launch", f"{', '.join(n for n, _ in alive)} still running; sending {sig.name}")
            for _, p in alive:
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            for _, p in alive:
                try:
                    p.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for t in self._threads:
            t.join(2.0)
        return {n: p.returncode for n, p in self.procs.items()}


def run(path: str | Path, overrides: dict[str, str] | None = None, log_dir: Path | None = None,
        duration_s: float | None = None, console: TextIO | None = sys.stdout) -> int:
    """Run a launch file until Ctrl-C/SIGTERM, ``duration_s``, or a node exiting; return the exit code."""
    launcher = Launcher(parse_launch(path, overrides), log_dir, console)
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    died: dict[str, int] = {}
    try:
        launcher.start()
        launcher._say("launch", f"logs in {launcher.log_dir}")
        deadline = None if duration_s is None else time.monotonic() + duration_s
        while not stop.wait(0.1):
            died = launcher.exited()
            if died or (deadline is not None and time.monotonic() > deadline):
                break
    finally:
        codes = launcher.shutdown()
        for s, handler in previous.items():
            signal.signal(s, handler)
    for name, code in died.items():
        log = launcher.log_dir / f"{name}.log"
        launcher._say("launch", f"node {name} exited on its own (code {code}); see {log}")
    if died:
        return 1
    # After our SIGINT, a clean node exits 0; a node killed by escalation did not stop cleanly.
    unclean = {n: c for n, c in codes.items() if c not in (0, -signal.SIGINT)}
    if unclean:
        launcher._say("launch", f"unclean shutdown: {unclean}")
        return 1
    return 0
