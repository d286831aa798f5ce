"""`python -m stagewise.rl` (what `stagewise learn` runs): the command line, parsed into a LearnConfig."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional

from .config import REWARDS, SHAPINGS, TASKS

USAGE = """Learn a policy through `stagewise serve` with the reward it serves: a TD3 learner (SAC optional) with a
LayerNorm critic ensemble, n-step returns, symmetry augmentation, optional replayed expert demonstrations; the
policy reads the simulator's state, the reward is the runtime's (`--reward model`: the reward model from pixels and
proprioception; `oracle`: the simulator's ground-truth progress, the ceiling; `sparse`: success only, the floor).

  python -m stagewise.rl --task push-target --reward model --seeds 0,1,2 --out runs/push
  python -m stagewise.rl --resume runs/push          # after a crash or kill -9: continues where it was

Writes <out>/curves.json (the config and command line, per seed: evaluated success against env steps),
<out>/curves.png, and per seed <out>/seed-<s>/policy/<task>-<reward>-<s>.toml (+ .onnx; `-best` beside it): a
policy that `stagewise eval policy --policy` and `stagewise run --policy` take as it is. Every --checkpoint-every env
steps the whole learning state goes to <out>/seed-<s>/checkpoint.pt, written atomically. The learner's servers die
with it; --resume starts fresh ones (the episodes a crash cut short count as truncated). The defaults are the
measured set-up of the shipped results (pick-place adds its own: see stagewise/rl/config.py TASK_DEFAULTS); the
stagewise binary is $STAGEWISE_BIN, else `stagewise` on PATH, else the checkout's build."""

# (flag, config key, type, help); a flag left out keeps the task's default (config.TASK_DEFAULTS over LearnConfig)
OPTIONS = {
    "reward form (asked of the training `serve`; the learner takes the served reward as it is)": [
        ("--shaping", "reward_form.shaping", SHAPINGS, "potential (default; r_task + c (gamma (phi' - X) - (phi - "
         "X)), policy-invariant), value (r_task + c (gamma Phi' - Phi), Phi = gamma^(K (1 - phi)), invariant; with "
         "--value-horizon K), progress (pick-place's default; NOT policy-invariant: r_task + S c (gamma phi' - "
         "phi) + c (1 - gamma) phi') or advice (look-ahead advice, invariant: the learner trains on r_task and reads "
         "Q as its critics' + c psi(s, a), psi regressing the model's phi after each decision)"),
        ("--shaping-scale", "reward_form.shaping_scale", float, "c (default: 10 for progress, 1 for potential, "
         "value and advice, the scales they were measured with)"),
        ("--potential-scale", "reward_form.potential_scale", float, "progress: S, scale of the potential part "
         "(default 1; pick-place 0.1)"),
        ("--success-progress-one", "reward_form.success_progress_one", bool, "progress: a step that ends in success "
         "reads phi' = 1 (default off; pick-place on)"),
        ("--phi-offset", "reward_form.phi_offset", float, "potential: X, the potential is phi - X (default 0)"),
        ("--value-horizon", "reward_form.value_horizon", float, "value: K, the potential is gamma^(K (1 - phi)), "
         "the value of a success K (1 - phi) env steps away (K: the steps a whole task takes, e.g. the "
         "demonstrations' mean length)"),
        ("--gamma", "reward_form.gamma", float, "discount of the learner and the shaping (default 0.99)"),
        ("--obs", "obs", ("state", "embeddings", "pixels"), "what the policy reads: state (default: the simulator's "
         "state, object poses included), embeddings (what a robot has: the reward model's frozen embeddings of the "
         "camera frames, `serve --embeddings`, and the hand's position and gripper width; needs --reward model) or "
         "pixels (what a robot has: the camera frames, --width x --height, through a conv encoder the critics train "
         "with random shifts (DrQ), and the hand's position and gripper width); symmetry augmentation off with "
         "either (on with --locator)"),
        ("--encoder-init", "encoder_init", str, "--obs pixels: the encoder's first weights: a stage-progress "
         "model's manifest, whose encoder it copies, a keypoint encoder (.pt, `python -m stagewise.training "
         "keypoints`: trained on camera frames alone; with --encoder-train head) or `random` (default: the served "
         "reward model's encoder; random with --reward sparse)"),
        ("--pixel-shift", "pixel_shift", int, "--obs pixels: random shift augmentation, up to this many pixels "
         "(default 2)"),
        ("--encoder-train", "encoder_train", ("all", "head"), "--obs pixels: what the critics train: all (default, "
         "DrQ) or head (only the per-view linear layer; the convs keep --encoder-init's weights and their output "
         "is cached in the replay: an update as cheap as on embeddings, no shift augmentation)"),
        ("--locator", "locator", str, "--obs pixels: a locator file (.pt, `python -m stagewise.training locator`: "
         "frames + proprioception -> where the objects are on the table, trained on a person's marks, frozen): the "
         "learner reads the hand and the located positions as the state learner reads the state, symmetry "
         "augmentation on (default 1); the policy still reads only frames and proprioception"),
        ("--locate-at-start", "locate_at_start", str, "--locator: these of its positions (comma-separated, e.g. "
         "target_x,target_y) are located on the episode's first observation, which the policy then also reads "
         "(the runtime keeps it per env): what does not move is seen at the start, before anything covers it"),
        ("--episode-ends", "episode_ends", ("env", "model"), "what ends a training episode and is its success: env "
         "(default: the simulator's success) or model (what a robot has: success detection on the served progress, "
         "--success-delta, and the time limit; evaluation still reads the simulator's success, and curves.json "
         "reports the model's false successes)"),
        ("--success-delta", "success_delta", float, "model ends: success once phi >= 1 - delta (default 0.05)"),
        ("--success-steps", "success_steps", int, "model ends: for this many steps in a row (default 1)"),
        ("--oracle-trap", "oracle_trap", str, "experiment, --reward oracle only: Z:PHI, the oracle over-reads "
         "progress as at least PHI while the hand is at or above Z m (the semantic-trap test, docs/shaping.md)"),
    ],
    "learner": [
        ("--algo", "agent.algo", ("td3", "sac"), "default td3"),
        ("--net", "agent.net", "ints", "hidden widths of actor and critics (default 128,128)"),
        ("--critics", "agent.critics", int, "critic ensemble size (default 2)"),
        ("--layer-norm", "agent.layer_norm", bool, "LayerNorm in the critics (default on)"),
        ("--lr", "agent.lr", float, "default 3e-4"),
        ("--tau", "agent.tau", float, "target critic update rate (default 0.005)"),
        ("--alpha", "agent.alpha", float, "sac: initial entropy coefficient (default 0.05)"),
        ("--auto-alpha", "agent.auto_alpha", bool, "sac: tune the entropy coefficient (default on)"),
        ("--target-entropy", "agent.target_entropy", float, "sac: target entropy = -this * |A| (default 1)"),
        ("--expl-noise", "agent.expl_noise", float, "td3: exploration noise std (default 0.2)"),
        ("--expl-noise-end", "expl_noise_end", float, "td3: noise std at the end, linear (default -1: constant)"),
        ("--gripper-binary", "agent.gripper_binary", bool, "td3: the gripper as a binary choice whose better value "
         "the actor is taught (default off; pick-place on)"),
        ("--gripper-flip", "gripper_flip", float, "share of exploratory decisions whose gripper command goes to "
         "its other extreme (default 0; pick-place 0.02)"),
        ("--gripper-flip-hold", "gripper_flip_hold", int, "decisions a flip holds (default 1; pick-place 8)"),
        ("--gripper-flip-rise", "gripper_flip_rise", bool, "an opening flip also lifts the hand (pick-place on)"),
        ("--batch", "batch", int, "default 256"),
        ("--utd", "utd", float, "critic updates per decision (default 2)"),
        ("--actor-every", "actor_every", int, "one actor update per this many critic updates (default 2)"),
        ("--nstep", "nstep", int, "n-step returns, in decisions (default 3)"),
        ("--action-repeat", "action_repeat", int, "env steps each action is held (default 4; the exported "
         "policy says so and the runtime holds its actions as long)"),
        ("--random-steps", "random_steps", int, "uniform random actions first (default 5000)"),
        ("--learning-starts", "learning_starts", int, "default 5000"),
        ("--augment-symmetry", "augment_symmetry", float, "share of each batch mapped by a random symmetry of the "
         "square about the block (default 1)"),
        ("--demo-seed", "demo_seed", int, "first simulator seed of the demonstrations (default 100000)"),
        ("--demo-ratio", "demo_ratio", float, "share of each batch from the demonstrations (default 0.5)"),
        ("--init", "init", str, "fine-tune: start the agent (weights, optimisers) from another learner's run "
         "directory (one seed) or its checkpoint.pt, trained with the same --obs, --net, --critics, --algo and "
         "camera size; its replay and curve stay there; --random-steps defaults to 0"),
        ("--init-replay", "init_replay", bool, "with --init, also its replay: the fine-tune samples the source's "
         "experience beside its own (default off)"),
    ],
    "learning from streaming actors (stagewise/rl/stream_learn.py)": [
        ("--from-stream", "from_stream", bool, "learn from `stagewise run` actors streaming over zenoh (asynchronous: "
         "they act at their rate, never wait, and take the signed policies pushed back) instead of stepping a "
         "`serve`"),
        ("--actors", "actors", int, "start this many local actors and a loopback router (default 1); 0: join "
         "running ones (--robots, --stream-connect)"),
        ("--actor-envs", "actor_envs", int, "envs per started actor (default 4)"),
        ("--actor-hz", "actor_hz", float, "control rate of the started actors (default 50)"),
        ("--robots", "robots", str, "comma-separated --robot-name of the actors to learn from (default: the started "
         "ones, actor-0..); transitions of any other robot are refused and counted"),
        ("--stream-connect", "stream_connect", str, "zenoh endpoint where the running actors are (a router)"),
        ("--push-every", "push_every", float, "seconds between policy pushes (default 5)"),
        ("--policy-secret-file", "policy_secret_file", str, "file holding the hex ed25519 secret key policies are "
         "signed with (`stagewise policy keygen`); default: a key made for this run, given to the started actors"),
    ],
    "envs, evaluation, files": [
        ("--envs", "envs", int, "training envs, one server (default 4)"),
        ("--max-steps", "max_steps", int, "training episode length (default 200; pick-place 300)"),
        ("--eval-every", "eval_every", int, "env steps between evaluations (default 10000; pick-place 20000)"),
        ("--eval-episodes", "eval_episodes", int, "held-out seeds per evaluation (default 50)"),
        ("--eval-envs", "eval_envs", int, "evaluation envs (default 10)"),
        ("--eval-seed", "eval_seed", int, "first held-out seed (default 7000000)"),
        ("--eval-max-steps", "eval_max_steps", int, "evaluation episode length (0: the task's; -1: --max-steps)"),
        ("--eval-repeat", "eval_repeat", int, "hold each evaluated action this many steps (0: --action-repeat)"),
        ("--checkpoint-every", "checkpoint_every", int, "env steps between crash-safe checkpoints (default 10000; "
         "0: only at the end)"),
        ("--export-checkpoints", "export_checkpoints", bool, "also export the policy at every evaluation"),
        ("--width", "width", int, "camera width of a --reward model server (default 32)"),
        ("--height", "height", int, "camera height (default 32)"),
        ("--serve-endpoint", "serve_endpoint", str, "train on a `stagewise serve` already running there (e.g. "
         "tcp/127.0.0.1:7447) instead of starting one: it outlives the learner, a --resume reconnects to it; one "
         "seed; it must serve --envs, --max-steps and the reward form asked for (the reward form is checked)"),
        ("--serve-robot", "serve_robot", str, "that server's --robot-name (default sim0)"),
    ],
}

SMOKE = {"steps": 3000, "random_steps": 1000, "learning_starts": 1000, "eval_every": 1500, "eval_episodes": 5,
         "agent.net": (64, 64), "eval_envs": 5, "max_steps": 100, "eval_max_steps": -1, "utd": 0.5}


def _ints(text: str):
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m stagewise.rl", description=USAGE, usage=(
                                     "%(prog)s --task T --reward model|oracle|sparse [--model MANIFEST] [--demos N] "
                                     "[--steps S] [--seeds 0,1,2] --out DIR [--resume [DIR]] [options]"),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=TASKS, help="simulated task (required unless --resume)")
    ap.add_argument("--reward", choices=REWARDS, help="what the training server shapes with (required unless --resume)")
    ap.add_argument("--model", metavar="MANIFEST", help="reward model manifest for --reward model (default: the task's shipped model)")
    ap.add_argument("--demos", type=int, default=argparse.SUPPRESS, metavar="N",
                    help="expert demonstrations replayed into a second buffer (default 0)")
    ap.add_argument("--steps", type=int, default=argparse.SUPPRESS, metavar="S",
                    help="env steps per seed (default 150000; pick-place 300000)")
    ap.add_argument("--seeds", type=_ints, default=None, metavar="S,S", help="comma-separated learner seeds (default 0)")
    ap.add_argument("--out", metavar="DIR", help="output directory (new or empty, unless --resume)")
    ap.add_argument("--resume", nargs="?", const=True, default=None, metavar="DIR",
                    help="continue the run in DIR (or --out) from its last checkpoint; flags given must agree with it, "
                         "except a larger --steps, which extends the run (finished seeds too)")
    ap.add_argument("--smoke", action="store_true", help="CI size: 3000 steps, 100-step episodes, 64x64 nets, ...")
    for group, opts in OPTIONS.items():
        g = ap.add_argument_group(group)
        for flag, key, typ, text in opts:
            dest = key.replace(".", "__")
            if typ is bool:
                g.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                               help=text)
            elif typ == "ints":
                g.add_argument(flag, dest=dest, type=_ints, default=argparse.SUPPRESS, metavar="W,W", help=text)
            elif isinstance(typ, tuple):
                g.add_argument(flag, dest=dest, choices=typ, default=argparse.SUPPRESS, help=text)
            else:
                g.add_argument(flag, dest=dest, type=typ, default=argparse.SUPPRESS, help=text,
                               metavar="N" if typ is int else "X")
    return ap


def parse(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    """{task, reward, seeds, out, resume, overrides}: `overrides` holds only the set-up options given (config keys)."""
    ap = parser()
    ns = vars(ap.parse_args(argv))
    overrides: Dict[str, Any] = dict(SMOKE) if ns.pop("smoke") else {}
    out = {k: ns.pop(k) for k in ("task", "reward", "seeds", "out", "resume")}
    if ns.get("model") is not None:  # absolute: the servers run in the checkout, not in this directory
        overrides["model"] = os.path.abspath(ns["model"])
    ns.pop("model", None)
    if ns.get("policy_secret_file"):
        ns["policy_secret_file"] = os.path.abspath(ns["policy_secret_file"])
    if ns.get("init"):
        ns["init"] = os.path.abspath(ns["init"])
    for k in ("encoder_init", "locator"):
        if ns.get(k) not in (None, "", "random"):
            ns[k] = os.path.abspath(ns[k])
    for k, v in ns.items():
        overrides[k.replace("__", ".")] = v
    if out["resume"] not in (None, True):
        if out["out"] and out["out"] != out["resume"]:
            ap.error(f"--resume {out['resume']} and --out {out['out']} name different directories")
        out["out"] = out["resume"]
    if not out["out"]:
        ap.error("--out DIR is required (or --resume DIR)")
    if out["resume"] is None and (out["task"] is None or out["reward"] is None):
        ap.error("--task and --reward are required (unless --resume continues a run)")
    out["resume"] = out["resume"] is not None
    out["overrides"] = overrides
    out["argv"] = ["python -m stagewise.rl", *(sys.argv[1:] if argv is None else argv)]
    return out
