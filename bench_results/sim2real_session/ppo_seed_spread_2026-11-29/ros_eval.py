"""An artifact's return over ROS 2 as the session benchmark measures it: a session like its "nominal" one (the sim
robot node, the policy node, the fine-tuner recording the robot file's reward, nothing learned), here under a gap
file, until EPISODES episodes of the artifact are in; prints their returns and the mean without the first (as
`lowrl bench sim2real_session` drops the first episode of a version).
Usage (repo root): python ros_eval.py ARTIFACT GAP_FILE SEED EPISODES RUN_DIR"""
import sys
from pathlib import Path

if __name__ == "__main__":
    import numpy as np

    from lowrl_ros.bench import sim2real_session as b

    artifact, gap, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    n, run_dir = int(sys.argv[4]), Path(sys.argv[5])
    run_dir.mkdir(parents=True, exist_ok=True)
    params = b._params_file(run_dir / "trainer_params.yaml", [], "")
    d, wall = b.session(run_dir / "eval", Path("config/robots/legged_ant.yaml").resolve(), artifact.resolve(), gap,
                        seed, params, lambda d: len(b._episodes(d)) >= n + 1, 1200.0, method="finetune")
    returns = [float(r["return"]) for r in b._episodes(d)]  # one artifact runs the whole session
    print({"artifact": str(artifact), "gap": gap, "seed": seed, "returns": [round(r, 1) for r in returns],
           "mean_without_first": float(np.mean(returns[1:])), "wall_s": round(wall)})
