"""curves.png: evaluated success and final oracle progress against env steps, per task (thin: seeds, thick: the
mean of the runs of one reward and label)."""

from __future__ import annotations

import itertools
import os
from typing import List

import numpy as np

COLORS = {"sparse": "tab:gray", "model": "tab:blue", "oracle": "tab:green"}


def plot(runs: List[dict], title: str, path, eval_episodes: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    tasks = sorted({r["task"] for r in runs})
    # one legend row per line of each task, under its pair of plots (long set-up labels do not fit inside)
    lines = [len({(r["reward"], r.get("label", r["reward"])) for r in runs if r["task"] == t}) for t in tasks]
    legend_h = 0.22 * max(lines)
    fig, axes = plt.subplots(len(tasks), 2, figsize=(11, (4 + legend_h) * len(tasks)), squeeze=False)
    for row, task in zip(axes, tasks):
        for reward, color in COLORS.items():
            mine = [r for r in runs if r["reward"] == reward and r["task"] == task and r["checkpoints"]]
            labels = list(dict.fromkeys(r.get("label", reward) for r in mine))
            for label, style in zip(labels, itertools.cycle(["-", "--", ":", "-."])):
                rs = [r for r in mine if r.get("label", reward) == label]
                for r in rs:
                    x = [c["steps"] for c in r["checkpoints"]]
                    for ax, key in ((row[0], "success"), (row[1], "final_progress")):
                        ax.plot(x, [c[key] for c in r["checkpoints"]], color=color, ls=style, lw=0.8, alpha=0.45)
                n = min(len(r["checkpoints"]) for r in rs)
                x = [c["steps"] for c in rs[0]["checkpoints"][:n]]
                for ax, key in ((row[0], "success"), (row[1], "final_progress")):
                    m = np.mean([[c[key] for c in r["checkpoints"][:n]] for r in rs], 0)
                    ax.plot(x, m, color=color, ls=style, lw=2.2, label=f"{label} (mean of {len(rs)})")
        row[0].axhline(0.8, color="k", ls=":", lw=0.8)
        row[0].set_ylabel(f"{task}: eval success ({eval_episodes} held-out seeds)")
        row[1].set_ylabel(f"{task}: eval final oracle progress")
        for ax in row:
            ax.set_xlabel("env steps")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 1000:g}k"))
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        row[0].legend(loc="upper left", bbox_to_anchor=(0.0, -0.14), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def title_of(cfg: dict) -> str:
    """The set-up in a figure's title, from a LearnConfig dict."""
    r, a = cfg["reward_form"], cfg["agent"]
    form = f"{r['shaping']} form, c={r['shaping_scale']:g}"
    if r["shaping"] == "progress" and r["potential_scale"] != 1.0:
        form += f", potential part x{r['potential_scale']:g}"
    if r.get("success_progress_one"):
        form += ", success phi 1"
    if r["shaping"] == "potential" and r["phi_offset"]:
        form += f", phi-{r['phi_offset']:g}"
    return (f"{a['algo'].upper()} via stagewise serve: {cfg['demos']} demos, gamma={r['gamma']}, {form}\n"
            f"max-steps {cfg['max_steps']}, utd {cfg['utd']}, n-step {cfg['nstep']}, action repeat "
            f"{cfg['action_repeat']}, symmetry aug. {cfg['augment_symmetry']} (thin: seeds, thick: mean)")


def _setup(r: dict):
    """(set-up tuple, reward model folder) of a run: from its LearnConfig dict (`config`, stagewise.rl) or the flat
    argument dict of benches/learner_shaping.py before the package (`args`); None where neither is known."""
    c = r.get("config")
    if c:
        rf, ag = c["reward_form"], c["agent"]
        form = rf.get("shaping", "progress")
        form = f"value K={rf['value_horizon']:g}" if form == "value" else form
        form += f" X={rf['phi_offset']:g}" if form == "potential" and rf.get("phi_offset") else ""
        form += f", trap {c['oracle_trap']}" if c.get("oracle_trap") else ""
        return ((c["demos"], rf["shaping_scale"], c["gripper_flip"], c["gripper_flip_hold"], ag["gripper_binary"],
                 c["gripper_flip_rise"], rf["success_progress_one"], rf["potential_scale"], form),
                os.path.dirname(c.get("model") or ""))
    a = r.get("args")
    if a:
        return ((a.get("demos", 0), a.get("shaping_scale"), a.get("gripper_flip", 0.0), a.get("gripper_flip_hold", 1),
                 a.get("gripper_binary", False), a.get("gripper_flip_rise", False),
                 a.get("success_progress_one", False), a.get("potential_scale", 1.0), a.get("reward_form", "progress")),
                os.path.dirname(a.get("model") or ""))
    return (None, None, 0.0, 1, False, False, False, 1.0, "progress"), ""


def run_label(runs: List[dict], model_names=None) -> None:
    """Merged runs made with different demonstrations, shaping scales, gripper flips, a binary gripper, success read
    as progress 1, a potential-part scale or reward model manifests get a label naming them ("model, c=3, 20 demos,
    flip 0.05, binary gripper, success phi 1, data/r5"), so the plot and its legend keep them apart; runs of one
    set-up keep the reward's name. `model_names` renames a model's folder in the label ("" = runs that recorded no
    model: the shipped model of their day)."""
    model_names = model_names or {}
    setups = [_setup(r) for r in runs]
    models = {m for r, (_, m) in zip(runs, setups) if r["reward"] == "model"}
    if len({su for su, _ in setups}) <= 1 and len(models) <= 1:
        return
    for r, ((demos, c, flip, hold, binary, rise, one, pot, form), model) in zip(runs, setups):
        # the progress form is the one every earlier result used: it stays unnamed, so their labels stay as they were
        named = "" if form == "progress" or r["reward"] == "sparse" else f", {form}"
        scale = named + ("" if r["reward"] == "sparse" or c is None else f", c={c:g}")
        scale += "" if r["reward"] == "sparse" or pot == 1.0 else f" (potential part x{pot:g})"
        flips = "" if not flip else f", flip {flip:g}" + (f" x{hold}" if hold > 1 else "") + (" rise" if rise else "")
        r["label"] = (f"{r['reward']}{scale}" + ("" if demos is None else f", {demos} demos") + flips
                      + (", binary gripper" if binary else "")
                      + (", success phi 1" if one and r["reward"] == "model" else "")
                      + (f", {model_names.get(model, model or 'shipped model')}"
                         if r["reward"] == "model" and len(models) > 1 else ""))
