"""Write a benchmark's results with the command that produced them and the machine they ran on."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(os.environ.get("LOWRL_BENCH_DIR", "bench_results"))


def machine() -> dict[str, Any]:
    """What the figures were measured on: CPU model, cores, memory, host, Python."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        mem_gib = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:  # psutil is a hard dependency; this only guards odd platforms
        mem_gib = None
    return {
        "host": socket.gethostname(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def command_line() -> str:
    return "lowrl " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else "lowrl"


def write_result(name: str, results: dict[str, Any], markdown: str, out_dir: Path | None = None) -> Path:
    """Write ``<name>.json`` and ``<name>.md`` (latest run) under bench_results/, return the JSON path.

    The markdown gets a header with the date, the command and the machine, so a figure never
    travels without how it was made.
    """
    out = Path(out_dir or RESULTS_DIR)
    out.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = {"benchmark": name, "date": stamp, "command": command_line(), "machine": machine()}
    json_path = out / f"{name}.json"
    tmp = json_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**meta, "results": results}, indent=2, default=float))
    tmp.replace(json_path)
    m = meta["machine"]
    header = (
        f"# lowrl bench {name}\n\n"
        f"- date: {stamp}\n- command: `{meta['command']}`\n"
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, host {m['host']}, "
        f"Python {m['python']}\n\n"
    )
    (out / f"{name}.md").write_text(header + markdown.rstrip() + "\n")
    return json_path
