"""Batch-1 actor inference: SB3 predict vs torch vs ONNX Runtime vs lowrl's engines, same weights.

For each network the same weights run through: SB3 ``predict(deterministic=True)`` (the baseline),
torch eager fp32, and lowrl artifacts (fp32 and int8; int8 at 0%, 90% and 95% magnitude-pruned
hidden layers) on the ORT engine, the numpy engine, and engine="auto". The networks:

- ``64``, ``256``, ``3x1024``: SB3 SAC actors 17-64-64-6, 17-256-256-6 (HalfCheetah's) and
  17-1024x3-6, ReLU, tanh output;
- ``256_elu``: the 17-256-256-6 SAC actor with ELU hidden layers;
- ``isaac_elu``: 48-512-256-128-12 ELU with a linear output, the shape of Isaac Lab's rsl_rl PPO
  locomotion actor, with the contract such an import carries (normalised observations clipped at
  5, action = default pose + 0.5 * y, clamped to the joint limits). Its baseline is SB3 PPO's
  ``predict`` (same actor layers) and torch eager, each with that normalisation, clip and action
  transform around it, as a deployment loop runs them.

Every call is timed alone (perf_counter_ns) through ``Policy.act``; variants run interleaved in
rounds, so drift in the shared machine's speed hits all of them alike. Ratios are against the SB3
baseline of the same run.

    lowrl bench inference                 # 20k calls per variant (a few minutes)
    lowrl bench inference --calls 2000    # quick look
"""
from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lowrl_ros.core.sim.plot import pyplot

@dataclass(frozen=True)
class NetSpec:
    """One benchmarked network: sizes, hidden activation, and the SB3 algorithm of its baseline."""

    obs_dim: int
    hidden: tuple[int, ...]
    act_dim: int
    activation: str = "relu"  # "relu" | "elu"
    algo: str = "sac"  # "sac": tanh output, limits [-1, 1]; "ppo": linear output, Isaac-Lab-style contract


NETS = {
    "64": NetSpec(17, (64, 64), 6),
    "256": NetSpec(17, (256, 256), 6),
    "3x1024": NetSpec(17, (1024, 1024, 1024), 6),
    "256_elu": NetSpec(17, (256, 256), 6, "elu"),
    "isaac_elu": NetSpec(48, (512, 256, 128), 12, "elu", "ppo"),
}
ISAAC_OBS_CLIP = 5.0  # rsl_rl / Isaac Lab clip normalised observations (clip_observations) at a few sigma
ISAAC_ACTION_SCALE = 0.5  # Isaac Lab's joint position action: default pose + 0.5 * y
ISAAC_LIMIT = 3.0  # joint limits, rad


def _sb3_model(spec: NetSpec, seed: int):
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO, SAC

    high = 1.0 if spec.algo == "sac" else 100.0  # PPO: the contract's transform and clamp come after predict

    class Env(gym.Env):  # only the spaces matter: nothing is stepped
        observation_space = gym.spaces.Box(-np.inf, np.inf, (spec.obs_dim,), np.float32)
        action_space = gym.spaces.Box(-high, high, (spec.act_dim,), np.float32)

        def reset(self, *, seed=None, options=None):
            return np.zeros(spec.obs_dim, np.float32), {}

        def step(self, action):
            return np.zeros(spec.obs_dim, np.float32), 0.0, False, False, {}

    act_fn = {"relu": torch.nn.ReLU, "elu": torch.nn.ELU}[spec.activation]
    if spec.algo == "sac":
        return SAC("MlpPolicy", Env(), policy_kwargs=dict(net_arch=list(spec.hidden), activation_fn=act_fn),
                   device="cpu", seed=seed, buffer_size=1, learning_starts=0)
    kwargs = dict(net_arch=dict(pi=list(spec.hidden), vf=[64]), activation_fn=act_fn)
    return PPO("MlpPolicy", Env(), policy_kwargs=kwargs, device="cpu", seed=seed, n_steps=8, batch_size=8)


def _actor_weights(model, spec: NetSpec):
    """The deterministic actor's Linear layers as MlpWeights.

    SAC: latent_pi + mu, tanh output; PPO: mlp_extractor.policy_net + action_net, linear output.
    """
    import torch

    from lowrl_ros.core.runtime.artifact import MlpWeights

    if spec.algo == "sac":
        mods, output = [*model.policy.actor.latent_pi, model.policy.actor.mu], "tanh"
    else:
        mods, output = [*model.policy.mlp_extractor.policy_net, model.policy.action_net], "none"
    layers = [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy())
              for m in mods if isinstance(m, torch.nn.Linear)]
    return MlpWeights(layers, spec.activation, output)


def _contract(spec: NetSpec, seed: int):
    from lowrl_ros.core.runtime.artifact import PolicyContract

    names = ([f"obs_{i}" for i in range(spec.obs_dim)], [f"action_{i}" for i in range(spec.act_dim)])
    if spec.algo == "sac":
        return PolicyContract(*names, [-1.0] * spec.act_dim, [1.0] * spec.act_dim)
    rng = np.random.default_rng(seed + 1)
    pose = np.tile([0.1, 0.8, -1.5], spec.act_dim // 3 + 1)[:spec.act_dim]  # hip, thigh, calf of each leg
    return PolicyContract(*names, [-ISAAC_LIMIT] * spec.act_dim, [ISAAC_LIMIT] * spec.act_dim,
                          obs_offset=rng.normal(0, 0.5, spec.obs_dim), obs_scale=rng.uniform(0.5, 2.0, spec.obs_dim),
                          obs_clip=ISAAC_OBS_CLIP, action_scale=[ISAAC_ACTION_SCALE] * spec.act_dim,
                          action_offset=pose)


def _wrap_contract(fn, contract, output_activation: str):
    """``fn`` (normalised obs -> network output) with the contract's normalisation, clip and action transform
    in numpy around it; ``fn`` itself for the SAC nets, whose contract is the identity around tanh."""
    if contract.action_scale is None and contract.obs_clip is None:
        return fn
    off, scale, clip = np.array(contract.obs_offset), np.array(contract.obs_scale), contract.obs_clip
    a_scale, a_off = contract.action_transform(output_activation)
    low, high = np.array(contract.action_low), np.array(contract.action_high)

    def act(obs: np.ndarray) -> np.ndarray:
        x = np.clip((obs - off) * scale, -clip, clip)
        return np.clip(a_off + a_scale * fn(x), low, high)

    return act


def _torch_actor(weights, contract):
    """torch eager: Linear/activation layers (+ the contract's normalisation, clip and transform, in torch)."""
    import torch

    mods = []
    hidden = {"relu": torch.nn.ReLU, "elu": torch.nn.ELU}[weights.hidden_activation]
    for i, (w, b) in enumerate(weights.layers):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        mods.append(lin)
        if i < len(weights.layers) - 1:
            mods.append(hidden())
        elif weights.output_activation == "tanh":
            mods.append(torch.nn.Tanh())
    net = torch.nn.Sequential(*mods).eval()
    if contract.action_scale is None and contract.obs_clip is None:
        def act(obs: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return net(torch.as_tensor(obs, dtype=torch.float32)[None])[0].numpy().astype(np.float64)
    else:
        f32 = lambda v: torch.tensor(np.asarray(v), dtype=torch.float32)  # noqa: E731
        off, scale, clip = f32(contract.obs_offset), f32(contract.obs_scale), contract.obs_clip
        a_scale, a_off = (f32(v) for v in contract.action_transform(weights.output_activation))
        low, high = f32(contract.action_low), f32(contract.action_high)

        def act(obs: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                x = torch.clamp((torch.as_tensor(obs, dtype=torch.float32) - off) * scale, -clip, clip)
                y = torch.minimum(torch.maximum(a_off + a_scale * net(x[None])[0], low), high)
                return y.numpy().astype(np.float64)

    buf = io.BytesIO()
    torch.save(net.state_dict(), buf)
    return act, len(buf.getvalue())


def _time_rounds(variants: dict, obs: np.ndarray, calls: int, rounds: int, label: str,
                 around: dict | None = None) -> dict[str, np.ndarray]:
    """Per-call ns of each variant; variants interleaved, order rotated every round.

    ``around[name] = (enter, leave)`` runs outside the timed block of that variant (thread settings).
    """
    around = around or {}
    names = list(variants)
    per_round = max(1, calls // rounds)
    times = {n: np.empty(per_round * rounds, np.int64) for n in names}
    pc = time.perf_counter_ns
    n_obs = len(obs)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            f, ts, base = variants[name], times[name], r * per_round
            enter, leave = around.get(name, (None, None))
            if enter:
                enter()
            for k in range(per_round):
                o = obs[k % n_obs]
                t0 = pc()
                f(o)
                ts[base + k] = pc() - t0
            if leave:
                leave()
        done = (r + 1) / rounds
        print(f"\r  {label}: [{'#' * int(30 * done):<30}] round {r + 1}/{rounds}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return times


def bench_net(name: str, spec: NetSpec, calls: int, rounds: int, tmp: Path, seed: int) -> list[dict]:
    from lowrl_ros.core.runtime.artifact import prune_by_magnitude, reference_action, save_artifact
    from lowrl_ros.core.runtime.engines import load_artifact

    model = _sb3_model(spec, seed)
    weights = _actor_weights(model, spec)
    contract = _contract(spec, seed)
    import torch

    torch_act, state_dict_bytes = _torch_actor(weights, contract)
    predict = _wrap_contract(lambda o: model.predict(o, deterministic=True)[0], contract,
                             weights.output_activation)
    # The baseline is SB3 as a user runs it (torch's default thread count); the same call with one
    # torch thread is reported beside it, since at batch 1 threads mostly add overhead.
    variants = {"sb3_predict": predict, "sb3_predict_1thread": predict, "torch_eager_fp32": torch_act}
    default_threads = torch.get_num_threads()
    around = {"sb3_predict_1thread": (lambda: torch.set_num_threads(1),
                                      lambda: torch.set_num_threads(default_threads))}
    info: dict[str, dict] = {"sb3_predict": {"bytes": None, "weights": weights},
                             "sb3_predict_1thread": {"bytes": None, "weights": weights},
                             "torch_eager_fp32": {"bytes": state_dict_bytes, "weights": weights}}
    for int8, sparsity in [(False, 0.0), (True, 0.0), (True, 0.9), (True, 0.95)]:
        w = prune_by_magnitude(weights, sparsity, skip_output=True) if sparsity else weights
        tag = f"{'int8' if int8 else 'fp32'}{f'_s{int(sparsity * 100)}' if sparsity else ''}"
        path = save_artifact(tmp / f"{name}_{tag}.onnx", w, contract, int8=int8)
        engines = ("ort", "numpy", "auto") if int8 else ("ort", "numpy")
        for engine in engines:
            policy = load_artifact(path, engine=engine)
            key = f"{engine}_{tag}"
            variants[key] = policy.act
            info[key] = {"bytes": path.stat().st_size, "weights": w, "engine": policy.engine,
                         "reason": policy.engine_choice_reason, "kernels": policy.kernels, "macs": policy.macs}
    # Normalised observations standard normal: what the network was trained on.
    z = np.random.default_rng(seed).standard_normal((512, spec.obs_dim))
    obs = np.array(contract.obs_offset) + z / np.array(contract.obs_scale)
    times = _time_rounds(variants, obs, calls, rounds, f"net {name}", around)
    base_p50 = float(np.percentile(times["sb3_predict"], 50))
    rows = []
    for key, ts in times.items():
        p50, p99 = float(np.percentile(ts, 50)), float(np.percentile(ts, 99))
        meta = info[key]
        # Accuracy against the fp32 reference of the *unpruned* weights (what pruning/int8 cost).
        got = np.stack([variants[key](o) for o in obs[:64]])
        err = float(np.abs(got - reference_action(weights, contract, obs[:64])).max())
        rows.append({
            "net": name, "variant": key, "calls": int(ts.size),
            "p50_us": p50 / 1e3, "p99_us": p99 / 1e3, "mean_us": float(ts.mean()) / 1e3,
            "speedup_vs_sb3_p50": base_p50 / p50,
            "bytes": meta["bytes"],
            "bytes_vs_fp32_state_dict": (meta["bytes"] / state_dict_bytes) if meta["bytes"] else None,
            "fp32_state_dict_bytes": state_dict_bytes,
            "max_abs_err_vs_fp32": err,
            "engine": meta.get("engine"), "kernels": meta.get("kernels"), "reason": meta.get("reason"),
        })
    return rows


def _markdown(rows: list[dict], calls: int, rounds: int) -> str:
    lines = [
        f"Batch-1 `act(obs)` latency, {calls} calls per variant in {rounds} interleaved rounds; "
        "speed-up = SB3 predict p50 / variant p50 (same run). Bytes: file on disk vs the fp32 torch "
        "state_dict. err: max |action - fp32 reference| over 64 observations (action range [-1, 1]; "
        f"isaac_elu [-{ISAAC_LIMIT:g}, {ISAAC_LIMIT:g}]).",
        "",
        "| net | variant | p50 µs | p99 µs | speed-up vs SB3 | bytes | vs fp32 state_dict | err | engine (kernels) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        size = f"{r['bytes']:,}" if r["bytes"] else "-"
        ratio = f"{r['bytes_vs_fp32_state_dict']:.3f}" if r["bytes_vs_fp32_state_dict"] else "-"
        eng = (r["engine"] or "") + (f" ({'/'.join(r['kernels'])})" if r["kernels"] else "")
        lines.append(f"| {r['net']} | {r['variant']} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | "
                     f"{r['speedup_vs_sb3_p50']:.1f}x | {size} | {ratio} | {r['max_abs_err_vs_fp32']:.4f} | {eng} |")
    return "\n".join(lines)


def _targets(rows: list[dict]) -> list[str]:
    out = []
    r = next((x for x in rows if x["net"] == "256" and x["variant"] == "auto_int8"), None)
    if r:
        ok = r["p50_us"] <= 15 and r["p99_us"] <= 40 and r["speedup_vs_sb3_p50"] >= 20
        out.append(f"- 256-wide int8 (auto engine: {r['engine']}): p50 {r['p50_us']:.1f} µs (target ≤ 15), "
                   f"p99 {r['p99_us']:.1f} µs (≤ 40), {r['speedup_vs_sb3_p50']:.1f}x SB3 (≥ 20): "
                   f"{'MET' if ok else 'NOT MET'}")
    for net in ("256_elu", "isaac_elu"):  # no targets of their own: the relu net's, for comparison
        r = next((x for x in rows if x["net"] == net and x["variant"] == "auto_int8"), None)
        if r:
            ok = r["p50_us"] <= 15 and r["p99_us"] <= 40
            out.append(f"- {net} int8 (auto engine: {r['engine']}): p50 {r['p50_us']:.1f} µs, p99 {r['p99_us']:.1f} "
                       f"µs, {r['speedup_vs_sb3_p50']:.1f}x SB3 (the 256 relu net's ≤ 15 / ≤ 40 µs: "
                       f"{'within' if ok else 'outside'})")
    s = next((x for x in rows if x["net"] == "256" and x["variant"] == "ort_int8_s90"), None)
    if s:
        out.append(f"- 90%-sparse int8 artifact: {s['bytes']:,} bytes = {s['bytes_vs_fp32_state_dict']:.3f} of the "
                   f"fp32 state_dict (target ≤ 0.1): {'MET' if s['bytes_vs_fp32_state_dict'] <= 0.1 else 'NOT MET'}")
    return out


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()

    nets = list(dict.fromkeys(r["net"] for r in rows))
    fig, axes = plt.subplots(1, len(nets), figsize=(5 * len(nets), 5), sharey=True)
    for ax, net in zip(np.atleast_1d(axes), nets):
        sub = [r for r in rows if r["net"] == net]
        y = np.arange(len(sub))
        ax.barh(y, [r["p50_us"] for r in sub], color="tab:blue", label="p50")
        ax.scatter([r["p99_us"] for r in sub], y, color="tab:red", marker="|", s=200, label="p99")
        ax.set_yticks(y, [r["variant"] for r in sub])
        ax.set_xscale("log")
        ax.set_xlabel("µs per act() (log)")
        ax.set_title(f"net {net}")
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    np.atleast_1d(axes)[0].legend(loc="lower right")
    fig.suptitle("lowrl bench inference: batch-1 latency, same weights")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=20000,
                        help="timed calls per variant (>= 20000 for reported figures)")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds the calls are split into")
    parser.add_argument("--nets", nargs="+", choices=list(NETS), default=list(NETS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None,
                        help="results root (default bench_results/); the result goes to <root>/inference/seed<N>.*")


def headline(r: dict) -> str:
    """The bench_results headline: the targets, each met or not."""
    return "; ".join(t.lstrip("- ") for t in r["targets"])


def run(args: argparse.Namespace) -> int:
    from lowrl_ros.bench import record

    stem = record.result_path("inference", seed=args.seed, root=args.out)
    try:  # a result of another command there: refused before the measurement, not after
        record.check_free(stem, record.command_line())
    except record.ResultExists as exc:
        print(f"lowrl bench inference: {exc}", file=sys.stderr)
        return 2
    try:
        import stable_baselines3  # noqa: F401
        import torch
    except ImportError as exc:
        print(f"lowrl bench inference needs torch and stable-baselines3 for the baselines ({exc}); "
              "pip install 'lowrl_ros[train,sb3]'", file=sys.stderr)
        return 2
    if args.calls < 1 or args.rounds < 1:
        print("--calls and --rounds must be >= 1", file=sys.stderr)
        return 2
    threads = torch.get_num_threads()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.nets:
            rows += bench_net(name, NETS[name], args.calls, args.rounds, Path(tmp), args.seed)
    md = _markdown(rows, args.calls, args.rounds)
    md += (f"\n\nsb3_predict and torch_eager_fp32 ran with torch's default {threads} threads; "
           "sb3_predict_1thread with 1.")
    targets = _targets(rows)
    reasons = sorted({f"- {r['net']} {r['variant']}: {r['reason']}" for r in rows if r["variant"].startswith("auto_")})
    md += "\n\nTargets:\n" + "\n".join(targets) + "\n\nAuto engine choices (measured at load):\n" + "\n".join(reasons)
    png = stem.with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    _plot(rows, png)
    md += f"\n\n![latency]({png.name})\n"
    results = {"rows": rows, "torch_threads": threads, "calls": args.calls, "rounds": args.rounds,
               "targets": targets, "plot": str(png)}
    path = record.write_result("inference", results, md, seed=args.seed, root=args.out)
    print(md)
    print(f"\nwrote {path} and {png}")
    return 0
