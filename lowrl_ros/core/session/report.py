"""The session report: ``session_report.md`` (the summary ``lowrl demo`` prints) and ``session_report.png``.

Renders what core/session/analysis.py computes from a session directory (core/session/files.py).
Matplotlib is imported only inside the function that draws (core/sim/plot.py), so importing this
module costs nothing until a PNG is drawn.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from lowrl_ros.core.finetune.status import LEARNING, WAITING_FOR_FULL_TIER
from lowrl_ros.core.runtime.tiers import ComputeTier
from lowrl_ros.core.session.analysis import (
    SWAP_WINDOW_AFTER_S, SWAP_WINDOW_BEFORE_S, LoadOutcome, applied_tier, intervals, learner_seconds,
    load_outcome, process_cpu_by_tier, swap_windows, tier_costs, version_returns,
)
from lowrl_ros.core.session.files import (
    EPISODE_TERMS_CSV, FINETUNE_DIR, LATENCY_CSV, POLICY_STATS_CSV, REPORT_MD, REPORT_PNG, SYSID_STATUS,
    TERM_PREFIX, TIERS_CSV, SessionData, read_session,
)
from lowrl_ros.core.sim.plot import pyplot


def _pct(pair: tuple[int, int] | None) -> str:
    if pair is None:
        return "not covered by the policy node's stats"
    misses, ticks = pair
    return f"{misses} over {ticks} ticks ({100.0 * misses / max(ticks, 1):.1f} %)"


def adaptive_compute_lines(data: SessionData) -> list[str]:
    """The report's "Adaptive compute" section: the load phase, the tiers, misses and cost per tier,
    the fine-tuner's pause, and each process's CPU on the full tier and below it."""
    lines = ["", "## Adaptive compute", ""]
    load = data.info.get("load")
    if data.info.get("cpu_load_limit"):
        lines.append(f"- budget monitor's CPU-load limit: {data.info['cpu_load_limit']}")
    out = load_outcome(data)
    if out is None:
        lines.append("No CPU-load phase in this session" + (" (it ended before the load started)." if load else
                                                            " (lowrl demo --no-load, or not a demo session)."))
    else:
        def f(x: float | None) -> str:
            return "never" if x is None else f"t={x:.1f} s"

        lines.append(f"- CPU load: {out.burners} burner processes from t={out.start_s:.1f} s to "
                     f"t={out.end_s:.1f} s ({out.end_s - out.start_s:.0f} s{', cut short' if out.cut_short else ''})")
        if out.step_down_s is None:
            lines.append("- budget monitor: did **not** step the tier down during the load")
        else:
            back = ("did not come back to full" if out.back_to_full_s is None else
                    f"back to full at t={out.back_to_full_s:.1f} s ({out.back_to_full_s - out.end_s:.1f} s after the "
                    "load ended)")
            when = (f"{out.step_down_s - out.start_s:.1f} s into the load" if out.step_down_s >= out.start_s else
                    f"{out.start_s - out.step_down_s:.1f} s **before** the load: something else loaded the machine")
            lines.append(f"- budget monitor: full -> {out.lowest_tier.label} at t={out.step_down_s:.1f} s ({when}), "
                         f"{back}")
        lines.append(f"- deadline misses during the load: {_pct(out.misses)}; in the "
                     f"{out.end_s - out.start_s:.0f} s before it: {_pct(out.misses_before)}")
        if data.learner:
            lines.append(f"- fine-tuner: paused ({WAITING_FOR_FULL_TIER}) {f(out.paused_s)}, learning again "
                         f"{f(out.resumed_s)}")
    tiers = data.tiers.get("tier")
    if tiers is not None and len(tiers):
        changes = intervals(data.tiers["time_s"], tiers.astype(int), float(data.tiers["time_s"][-1]))
        lines.append("- tiers published: " + " -> ".join(
            f"{ComputeTier(int(v)).label} (t={a - data.t0:.1f} s)" for a, _, v in changes))
    lines += ladder_lines(data)
    costs = tier_costs(data)
    if costs:
        lines += ["", "| tier applied | time on it | control ticks | deadline misses | inferences/s | "
                      "inference p50 / p99 (us) |", "|---|---|---|---|---|---|"]
        for c in costs:
            lat = "—" if c.latency_p50_us is None else f"{c.latency_p50_us:.1f} / {c.latency_p99_us:.1f}"
            lines.append(f"| {c.tier.label} | {c.seconds:.1f} s | {c.ticks} | {c.misses} "
                         f"({100.0 * c.misses / max(c.ticks, 1):.1f} %) | {c.inferences_per_s:.1f} | {lat} |")
    seconds = learner_seconds(data)
    if seconds:
        lines.append("")
        lines.append("Fine-tuner's learner state (lowrl/finetune/learner): " + ", ".join(
            f"{state} {s:.0f} s" for state, s in sorted(seconds.items(), key=lambda kv: -kv[1])))
    notes = [str(n) for n in data.learner.get("notes", ()) if str(n)]
    if notes:  # what the learner started from (the residual learner: which data seeded its replay)
        lines.append(f"Fine-tuner's notes: {notes[-1]}")
    cpu = process_cpu_by_tier(data)
    if cpu:
        def pct(row: dict[str, float], key: str) -> str:
            return f"{row[key]:.0f}" if key in row else "—"

        lines.append("CPU use, % of one core, mean on the full tier / below it: " + "; ".join(
            f"{name} {pct(row, 'full')} / {pct(row, 'below full')}" for name, row in cpu.items()))
    return lines


def ladder_lines(data: SessionData) -> list[str]:
    """The ladder steps the policy node applied over time (``lowrl/policy/tier``: ``step``, ``ladder``,
    ``declared``), and whether the robot file declared that ladder or it is the robot's default."""
    p = data.policy_tier
    if not len(p.get("step", ())):
        return []
    steps = [f"{step} (t={t - data.t0:.1f} s" + (f", asked {asked})" if asked not in ("", step.split(":")[0])
                                                 else ")")
             for t, step, asked in zip(p["time_s"], p["step"], p["requested"])]
    ladders = list(dict.fromkeys(zip(p["ladder"], p["declared"])))
    allowed = "; ".join(f"{ladder} ({'declared in the robot file' if declared == 'True' else 'the robot default'})"
                        for ladder, declared in ladders)
    return [f"- ladder steps the policy applied: {' -> '.join(steps)}", f"- the robot's ladder: {allowed}"]


def reward_lines(data: SessionData) -> list[str]:
    """The report's "Reward terms and interventions" section (finetune/episode_terms.csv): each term's mean per
    episode for each policy version and for the first and last episodes, and the teleoperated steps."""
    lines = ["", "## Reward terms and interventions", ""]
    et = data.episode_terms
    names = data.term_names
    n = len(et.get("return", ()))
    if not n:
        lines.append(f"No {FINETUNE_DIR}/{EPISODE_TERMS_CSV}: the fine-tuner did not compute the reward from a robot "
                     "file's reward: terms (a reward topic, or no episode ended), so there are no per-term rewards.")
        return lines
    steps, interv = et["steps"], et["interventions"]
    ends = et["end"]
    whole = ends != "cut"  # cut short for the identification's recording: not in the means
    cut = "" if whole.all() else f", {int(np.sum(~whole))} cut for the identification's recording (not in the means)"
    lines.append(f"Fine-tuner's episodes: {n} ({int(np.sum(ends == 'terminated'))} terminated, "
                 f"{int(np.sum(ends == 'truncated'))} truncated{cut}), {int(steps.sum())} steps; interventions "
                 f"(teleoperated steps): {int(interv.sum())} ({100.0 * interv.sum() / max(steps.sum(), 1):.1f} % of "
                 f"the steps) in {int(np.sum(interv > 0))} episodes")
    versions = et["version"].astype(int)
    lines += ["", "Mean per episode (weighted, as summed into the return):", "",
              "| episodes | n | return | " + " | ".join(names) + " | interventions |",
              "|---" * (len(names) + 4) + "|"]
    groups = [(f"v{v}", whole & (versions == v)) for v in sorted(set(versions[whole]))]
    order = np.cumsum(whole) - 1  # each whole episode's place among them
    k = min(5, int(whole.sum()) // 2)  # first and last apart (nothing to compare with one episode)
    if k:
        groups += [(f"first {k}", whole & (order < k)), (f"last {k}", whole & (order >= whole.sum() - k))]
    for label, sel in groups:
        cells = [f"{et[TERM_PREFIX + t][sel].mean():.3g}" for t in names]
        lines.append(f"| {label} | {int(sel.sum())} | {et['return'][sel].mean():.3g} | " + " | ".join(cells)
                     + f" | {interv[sel].mean():.3g} |")
    return lines


def summarize(data: SessionData) -> str:
    """The markdown summary (also what `lowrl demo` prints)."""
    info = data.info
    lines = [f"# Sim-to-real session {data.path.name}", ""]
    lines.append(f"- robot: {info.get('env_id', '?')} with reality gap: {info.get('gap', 'unknown')}")
    if info.get("policy_path"):
        lines.append(f"- sim policy: {info['policy_path']}")
    finetune = info.get("finetune") or ("on (a finetune/ directory is here)" if (data.path / FINETUNE_DIR).is_dir()
                                        else "off (no finetune/ directory)")
    lines.append(f"- fine-tuning: {finetune}")
    if info.get("duration_s") is not None:
        lines.append(f"- duration: {float(info['duration_s']):.0f} s")
    lines.append("")
    n = data.n_episodes
    if n == 0:
        lines.append("The sim robot counted no episode end; the fine-tuner's own episode ends are below."
                     if len(data.episode_terms.get("return", ())) else
                     "No episode finished on the sim robot's count (run longer).")
    else:
        returns = data.episodes["return"]
        k = min(5, n)
        lines.append(f"Episodes: {n}; mean return of the first {k}: {returns[:k].mean():.1f}, of the last {k}: "
                     f"{returns[-k:].mean():.1f} (all: {returns.mean():.1f})")
        per_version = version_returns(data)
        if per_version:
            lines += ["", "| policy version | episodes | mean return | best | worst |", "|---|---|---|---|---|"]
            for v in sorted(per_version):
                r = np.asarray(per_version[v])
                lines.append(f"| v{v} | {len(r)} | {r.mean():.1f} | {r.max():.1f} | {r.min():.1f} |")
    sysid_path = data.path / SYSID_STATUS
    sysid = json.loads(sysid_path.read_text()) if sysid_path.is_file() else None
    if data.versions.get("versions"):
        v = data.versions
        lines += ["", f"Fine-tuner versions (finetune/versions.json): current v{v.get('current')}, "
                      f"best v{v.get('best')}"]
        for rec in v["versions"]:
            score = f"{np.mean(rec['returns']):.1f} over {len(rec['returns'])}" if rec.get("returns") else "not run"
            parent = "" if rec.get("parent_version") is None else f"parent v{rec['parent_version']}, "
            lines.append(f"- v{rec['version']} ({parent}{rec.get('updates', 0)} updates): {rec.get('status')}, "
                         f"return {score}")
    elif sysid is None and finetune.startswith("on"):
        lines += ["", "Fine-tuner: no versions.json yet (no version made)."]
    if sysid is not None:
        found = sysid.get("identified") or {}
        lines += ["", f"Off-board identification (trainer node, {SYSID_STATUS}): {sysid.get('decision')}"]
        if found:  # the fold (sysid) says its steps and time; the retraining's identification its replayed steps
            steps = found.get("robot_steps") or (found.get("details") or {}).get("steps_replayed")
            wall = found.get("wall_s")
            lines.append("- identified" + (f" from {steps} robot steps" if steps else "")
                         + (f" in {wall} s" if wall is not None else "") + f": {found.get('describe')}")
    lat = data.latency.get("latency_us")
    if lat is not None and len(lat):
        p50, p99 = np.percentile(lat, [50, 99])
        lines += ["", f"Inference latency over {len(lat)} calls: p50 {p50:.1f} us, p99 {p99:.1f} us"]
    if data.stats.get("ticks") is not None and len(data.stats["ticks"]):
        s = data.stats
        lines.append(f"Control ticks {int(s['ticks'][-1])}, deadline misses {int(s['deadline_misses'][-1])} "
                     "(as the policy node counted them since its activation)")
    swaps = swap_windows(data)
    if swaps:
        lines.append(f"Hot-swaps: {len(swaps)} ({', '.join(f'v{w.old}->v{w.new}' for w in swaps)}); deadline misses "
                     f"within -{SWAP_WINDOW_BEFORE_S:g}/+{SWAP_WINDOW_AFTER_S:g} s of them: "
                     f"{sum(w.misses for w in swaps)} over {sum(w.ticks for w in swaps)} ticks "
                     f"(per swap: {', '.join(str(w.misses) for w in swaps)})")
    tiers = data.tiers.get("tier")
    if tiers is not None and len(tiers):
        seen = ", ".join(ComputeTier(int(t)).label for t in sorted(set(tiers.astype(int))))
        changes = int(np.sum(tiers[1:] != tiers[:-1]))
        lines.append(f"Compute tiers seen: {seen} ({changes} changes)")
    lines += reward_lines(data)
    lines += adaptive_compute_lines(data)
    missing = [name for name, d in ((LATENCY_CSV, data.latency), (TIERS_CSV, data.tiers),
                                    (POLICY_STATS_CSV, data.stats)) if not d]
    if missing:
        lines += ["", f"Not recorded in this session: {', '.join(missing)} (lowrl demo records them)."]
    return "\n".join(lines) + "\n"


def _shade_load(ax: Any, out: LoadOutcome | None) -> None:
    if out is not None:
        ax.axvspan(out.start_s, out.end_s, color="orange", alpha=0.2, label=f"CPU load ({out.burners} burners)")


def _plot(data: SessionData, png: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(4, 2, figsize=(14, 14))
    ax = axes[0][0]
    e = data.episodes
    t0 = data.t0
    out = load_outcome(data)
    if data.n_episodes:
        t = e["time_s"] - t0
        versions = e["version_end"].astype(int)
        mixed = e["version_start"] != e["version_end"]
        known = sorted(v for v in set(versions) if v > 0)  # 0: the policy node had not reported yet
        for v in sorted(set(versions)):
            sel = (versions == v) & ~mixed
            if v == 0:
                label = "version not reported yet"
            else:
                label = f"sim policy (v{v})" if v == known[0] else f"fine-tuned v{v}"
            ax.plot(t[sel], e["return"][sel], "o", ms=4, label=label, color="lightgray" if v == 0 else None)
        if mixed.any():
            ax.plot(t[mixed], e["return"][mixed], "x", color="gray", label="episode across a swap")
        k = min(10, data.n_episodes)  # Pendulum's return depends on the start state: the trend needs a mean
        ax.plot(t[k - 1:], np.convolve(e["return"], np.ones(k) / k, mode="valid"), "k-", lw=1.5,
                label=f"mean of the last {k} episodes")
    et = data.episode_terms
    fine_tuner_episodes = not data.n_episodes and len(et.get("return", ()))
    if fine_tuner_episodes:  # the fine-tuner ends episodes (robot file episode:), the sim robot counts none
        for v in sorted(set(et["version"].astype(int))):
            sel = et["version"].astype(int) == v
            ax.plot(et["time_s"][sel] - t0, et["return"][sel], "o", ms=4, label=f"v{v} (fine-tuner's episodes)")
    _shade_load(ax, out)
    if data.n_episodes or fine_tuner_episodes:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set(title="episode return over time", xlabel="session time (s)", ylabel="return")
    ax = axes[0][1]
    if data.n_episodes:
        ax.step(e["time_s"] - t0, e["version_end"], where="post")
    elif fine_tuner_episodes:
        ax.step(et["time_s"] - t0, et["version"], where="post")
    _shade_load(ax, out)
    ax.set(title="running policy version", xlabel="session time (s)", ylabel="version")
    ax = axes[1][0]  # tiers, the load and the fine-tuner's pause on one time axis
    if data.tiers:
        ax.step(data.tiers["time_s"] - t0, data.tiers["tier"], where="post", label="tier published (monitor)")
        if len(data.stats.get("tier", ())):
            ax.step(data.stats["time_s"] - t0, data.stats["tier"], where="post", ls="--",
                    label="tier applied (policy node)")
        ax.set_yticks([t.value for t in ComputeTier], [t.label for t in ComputeTier])
    else:
        ax.text(0.5, 0.5, "tiers not recorded", ha="center", transform=ax.transAxes)
    ln = data.learner
    if len(ln.get("state", ())):
        end = float(ln["time_s"][-1])
        look = {WAITING_FOR_FULL_TIER: ("red", "fine-tuner paused (waiting for the full tier)"),
                LEARNING: ("green", "fine-tuner learning")}
        for a, b, state in intervals(ln["time_s"], ln["state"], end):
            if state in look:  # the legend keeps one entry per label (deduplicated below)
                ax.axvspan(a - t0, b - t0, ymin=0.0, ymax=0.08, color=look[state][0], alpha=0.6, lw=0,
                           label=look[state][1])
    _shade_load(ax, out)
    ax.set_ylim(-0.3, 3.3)
    ax.invert_yaxis()  # cheaper tiers lower on the plot
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="lower left")
    ax.set(title="compute tier and the fine-tuner's learner", xlabel="session time (s)")
    ax = axes[1][1]  # CPU: what the monitor saw, and what each process used
    b = data.budget
    if len(b.get("cpu_load_pct", ())):
        ax.plot(b["time_s"] - t0, b["cpu_load_pct"], "k-", lw=1.5, label="system CPU load, % (budget monitor)")
    pc = data.process_cpu
    for name in sorted(set(pc.get("process", ()))):
        if str(name).startswith("burner"):
            continue
        sel = pc["process"] == name
        ax.plot(pc["time_s"][sel] - t0, pc["cpu_pct"][sel], lw=1, label=f"{name}, % of one core")
    _shade_load(ax, out)
    if len(b.get("cpu_load_pct", ())) or len(pc.get("process", ())):
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.text(0.5, 0.5, "CPU not recorded", ha="center", transform=ax.transAxes)
    ax.set(title="CPU use", xlabel="session time (s)", ylabel="%")
    ax = axes[2][0]
    st = data.stats
    if len(st.get("ticks", ())) > 1 and st["time_s"][-1] - st["time_s"][0] >= 2.0:
        # Per whole second of the counters (interpolated): the 10 Hz stats reach the recorder in bunches
        # on a busy machine, and a rate over 10 ms between two of them would read as thousands per second.
        t = st["time_s"]
        grid = np.arange(np.ceil(t[0]), np.floor(t[-1]) + 1.0)
        for key, style, label in (("deadline_misses", "r-", "deadline misses per second"),
                                  ("ticks", "b-", "control ticks per second")):
            per_s = np.clip(np.diff(np.interp(grid, t, st[key])), 0, None)  # a restarted node resets its counters
            ax.plot(grid[1:] - t0, per_s, style, lw=1, label=label)
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.text(0.5, 0.5, "policy stats not recorded", ha="center", transform=ax.transAxes)
    _shade_load(ax, out)
    ax.set(title="policy node: ticks and deadline misses", xlabel="session time (s)", ylabel="per second")
    ax = axes[2][1]
    lat = data.latency.get("latency_us")
    if lat is not None and len(lat):
        hi = float(np.percentile(lat, 99.5)) * 1.1 or 1.0
        tiers = applied_tier(data, data.latency["time_s"])
        for k in sorted(set(tiers)):
            label = "before the first stats" if k < 0 else ComputeTier(int(k)).label
            ax.hist(lat[tiers == k], bins=50, range=(0, hi), alpha=0.6, label=f"{label} ({int((tiers == k).sum())})")
        ax.legend(fontsize=7)
        ax.set(xlabel="inference latency (us)", ylabel="calls")
    else:
        ax.text(0.5, 0.5, "latency not recorded", ha="center", transform=ax.transAxes)
    ax.set(title="inference latency per applied tier")
    _plot_rewards(data, axes[3][0], axes[3][1])
    fig.suptitle(f"session {data.path.name}: {data.info.get('env_id', '')}, gap {data.info.get('gap', '')}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


def _plot_rewards(data: SessionData, ax_terms: Any, ax_interv: Any) -> None:
    """Each reward term's sum per episode over time, and the teleoperated steps per episode."""
    et = data.episode_terms
    if not len(et.get("return", ())):
        for ax in (ax_terms, ax_interv):
            ax.text(0.5, 0.5, "no per-term rewards (finetune/episode_terms.csv)", ha="center", transform=ax.transAxes)
    else:
        t = et["time_s"] - data.t0
        for name in data.term_names:
            ax_terms.plot(t, et[TERM_PREFIX + name], ".-", lw=1, ms=3, label=name)
        ax_terms.plot(t, et["return"], "k-", lw=1.5, label="return (sum)")
        ax_terms.axhline(0.0, color="gray", lw=0.5)
        ax_terms.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        width = max(float(np.median(np.diff(t))) * 0.8, 0.1) if len(t) > 1 else 1.0
        ax_interv.bar(t, et["interventions"], width=width, color="purple", alpha=0.7,
                      label="teleoperated steps per episode")
        ax_interv.plot(t, et["steps"], "k_", ms=8, label="steps per episode")
        ax_interv.legend(fontsize=7, loc="upper left")
    ax_terms.set(title="reward terms per episode (fine-tuner)", xlabel="session time (s)", ylabel="sum over episode")
    ax_interv.set(title="interventions", xlabel="session time (s)", ylabel="steps")


def write_session_report(session_dir: str | Path) -> Path:
    """Draw ``session_report.png`` and write ``session_report.md`` in ``session_dir``; return the .md path.

    Raises:
        ValueError: ``session_dir`` is not a session directory (the message says what to give).
    """
    data = read_session(session_dir)
    png, md = data.path / REPORT_PNG, data.path / REPORT_MD
    _plot(data, png)
    md.write_text(summarize(data) + f"\n![session]({REPORT_PNG})\n")
    return md

