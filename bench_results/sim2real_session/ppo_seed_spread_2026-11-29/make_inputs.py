"""Write the identified gap of one seed of the session benchmark's current result (ident_s<seed>.yaml) and the
spread the trainer node retrained it with (spread_s<seed>: lowrl_ros.core.retrain.job.spread_of, 2 sigmas).
Usage: python make_inputs.py RESULT_JSON SEED"""
import json
import sys
from pathlib import Path

import yaml

from lowrl_ros.core.retrain.job import spread_of
from lowrl_ros.core.runtime.robot_file import load_robot_file
from lowrl_ros.core.sim.robot_sim import parse_sim

if __name__ == "__main__":
    result, seed = json.loads(Path(sys.argv[1]).read_text()), int(sys.argv[2])
    found = next(s for s in result["results"]["seeds"] if s["seed"] == seed)["identified"]
    priors = dict(parse_sim(load_robot_file(result["results"]["robot"]))[0].gap_priors)
    here = Path(__file__).parent
    (here / f"ident_s{seed}.yaml").write_text(yaml.safe_dump({"gap": found["gap"]}))
    spread = spread_of(found, priors, 2.0)
    (here / f"spread_s{seed}").write_text(",".join(f"{k}={v:.3g}" for k, v in spread.items()))
    print(spread)
