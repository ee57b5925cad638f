"""../one_sided_2026-11-29/reidentify.py with the objective chosen: NEWOBJ=1 the two-sample one (newobj.py), else
the package's. A job.json whose robot_file no longer exists (a removed worktree) reads config/robots/<its name>.

    [NEWOBJ=1 (one worker)] [WORKERS=2] python reid.py GAP_FILE RETRAIN_DIR [RETRAIN_DIR ...]
"""
import importlib.util
import json
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(f, *args, **kwargs):
    data = _json_load(f, *args, **kwargs)
    if isinstance(data, dict) and "robot_file" in data and not Path(data["robot_file"]).is_file():
        data["robot_file"] = str(ROOT / "config/robots" / Path(data["robot_file"]).name)
    return data


_json_load = json.load

if __name__ == "__main__":
    if _module(HERE / "newobj.py").asked():
        os.environ["WORKERS"] = "1"  # spawned replay workers would use the package's objective
    json.load = _load
    _module(HERE.parent / "one_sided_2026-11-29/reidentify.py").main()
