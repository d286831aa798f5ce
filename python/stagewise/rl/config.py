"""Typed configuration of a learning run. The defaults are the measured set-up of the shipped results
(benches/results/learner_shaping_push_sg: TD3, 128x128, LayerNorm critics, each action held 4 env steps, 2 critic
updates per decision, n-step 3, symmetry augmentation) with the policy-invariant potential form at c = 1
(benches/results/invariant_push, docs/shaping.md "Which form teaches"); `TASK_DEFAULTS` adds what a task's shipped
result changed (pick-place: the progress form at c = 10 with the potential part x0.1 and success read as progress 1,
300-step episodes, the gripper options)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

TASKS = ("pick-place", "push-target", "stack")
#: What a robot senses of itself: the policy's state beside the camera embeddings with --obs embeddings.
PROPRIOCEPTION = ("ee_x", "ee_y", "ee_z", "gripper_width")
REWARDS = ("model", "oracle", "sparse")
SHAPINGS = ("potential", "value", "progress", "advice")


@dataclass(frozen=True)
class AgentConfig:
    algo: str = "td3"  # td3 (deterministic actor, Gaussian exploration, target smoothing) or sac
    net: Tuple[int, ...] = (128, 128)
    critics: int = 2  # ensemble size (RLPD: the target takes the min over a random pair when > 2)
    layer_norm: bool = True
    lr: float = 3e-4
    tau: float = 0.005
    alpha: float = 0.05  # sac: initial entropy coefficient
    auto_alpha: bool = True
    target_entropy: float = 1.0  # sac: target entropy = -this * |A|
    expl_noise: float = 0.2  # td3: exploration noise std
    gripper_binary: bool = False  # td3: the gripper as a binary choice (HIL-SERL), see Agent


@dataclass(frozen=True)
class RewardConfig:
    """The reward form the training `serve` is asked for (`--shaping ...`); the learner takes the served reward as
    it is. `progress` (NOT policy-invariant): r = r_task + S c (gamma phi' - phi) + c (1 - gamma) phi' (terminated:
    r_task - S c phi + c phi*, phi* = 1 on success with `success_progress_one`, else phi'); `potential`: r = r_task +
    c (gamma (phi' - X) - (phi - X)), terminal potential 0 (policy-invariant); `value`: the same with the potential
    gamma^(K (1 - phi)), K = `value_horizon` env steps per whole task (policy-invariant); `advice` (look-ahead
    advice, Wiewiora et al. 2003, policy-invariant): the server serves the potential form, but the learner trains on
    its task reward alone and adds c psi(s, a) to every Q it reads, psi regressing the model's phi after each
    decision (docs/shaping.md). Ignored for `--reward sparse`. The default c is the one each form was measured with
    (`SHAPING_SCALE`)."""

    shaping: str = "potential"
    shaping_scale: float = 1.0  # c
    potential_scale: float = 1.0  # S (progress only)
    success_progress_one: bool = False  # progress only
    phi_offset: float = 0.0  # X (potential only)
    value_horizon: float = 0.0  # K (value only): env steps a whole task takes
    gamma: float = 0.99  # the learner's discount, and the server's (they must agree)


@dataclass(frozen=True)
class LearnConfig:
    task: str = "push-target"
    reward: str = "model"  # model | oracle | sparse
    model: Optional[str] = None  # reward model manifest (default: the task's shipped model)
    steps: int = 150_000  # env steps per seed (all training envs together)
    envs: int = 4  # training envs (one `serve --envs N`, stepped concurrently)
    max_steps: int = 200  # training episode length (truncation; bootstrapped)
    action_repeat: int = 4  # each decision's action is held this many env steps
    utd: float = 2.0  # critic updates per decision
    actor_every: int = 2  # one actor update per this many critic updates
    nstep: int = 3  # n-step returns, in decisions
    batch: int = 256
    random_steps: int = 5000  # uniform random actions first
    learning_starts: int = 5000
    expl_noise_end: float = -1.0  # td3: noise std at the end, linear in env steps (-1: constant)
    gripper_flip: float = 0.0  # share of exploratory decisions whose gripper command goes to its other extreme
    gripper_flip_hold: int = 1  # decisions a flip holds
    gripper_flip_rise: bool = False  # an opening flip also commands the hand up
    augment_symmetry: float = 1.0  # share of each batch mapped by a random symmetry of the square (Symmetry)
    demos: int = 0  # expert demonstrations replayed into a second buffer
    demo_seed: int = 100_000
    demo_ratio: float = 0.5  # share of each batch from the demonstrations
    eval_every: int = 10_000
    eval_episodes: int = 50
    eval_envs: int = 10
    eval_seed: int = 7_000_000  # held-out seeds eval_seed + i, the same at every evaluation
    eval_max_steps: int = 0  # 0: the task's own (as `stagewise eval policy`); -1: max_steps
    eval_repeat: int = 0  # 0: action_repeat (the policy as trained and as the runtime runs its export)
    checkpoint_every: int = 10_000  # env steps between crash-safe checkpoints (0: only at the end)
    export_checkpoints: bool = False  # also export the policy at every evaluation
    width: int = 32  # camera frames of a `--reward model` server
    height: int = 32
    # A `stagewise serve` already running for the training envs ("" : the learner starts its own): its endpoint and
    # its `--robot-name`. It outlives the learner, so a restarted (`--resume`) learner reconnects to it.
    serve_endpoint: str = ""
    serve_robot: str = "sim0"
    # The semantic-trap experiment (docs/shaping.md): "Z:PHI", the training server's oracle over-reads progress as
    # at least PHI while the hand is at or above Z metres ("" : no trap). Only with --reward oracle.
    oracle_trap: str = ""
    # What ends a training episode and counts as its success: "env" (the simulator's success, failure, time limit)
    # or "model" (what a robot has: the training server's success detection on the served progress, phi >= 1 -
    # success_delta for success_steps steps, and the time limit; `serve --episode-ends model`). Evaluation always
    # reads the simulator's success.
    # What the policy and critics read: "state" (the simulator's state vector: block and target poses included)
    # or "embeddings" (what a robot has: the reward model's embeddings of the camera frames, `serve
    # --embeddings`, and the proprioception PROPRIOCEPTION; no object pose reaches the learner).
    # "pixels" (what a robot has): the camera frames (`serve --images`, --width x --height) through a conv encoder
    # the critics train with random shifts of up to `pixel_shift` pixels (DrQ), and the proprioception.
    # `encoder_init`: the encoder's first weights, a stage-progress model manifest's encoder ("": the served reward
    # model's, random with --reward sparse), a keypoint encoder file (.pt, training/keypoints.py) or "random".
    obs: str = "state"
    encoder_init: str = ""
    pixel_shift: int = 2
    # "all": the critics train the whole encoder (DrQ); "head": only its per-view linear layer, the convs kept as
    # `encoder_init` has them and their output cached in the replay (an update as cheap as on embeddings)
    encoder_train: str = "all"
    # a locator file (training/locator.py: frames + proprioception -> the objects' table positions, trained on a
    # person's marks, frozen): with --obs pixels the learner reads the proprioception and the located positions, as
    # the state learner reads the state, with the symmetry augmentation; the exported policy reads the frames
    locator: str = ""
    # with a locator: these of its positions (comma-separated, e.g. "target_x,target_y") are located on the
    # episode's first observation, which the policy also reads (the runtime keeps it per env, manifest
    # `pixels.remember_first`): a fixed target is seen at the start, before the pushed block covers it
    locate_at_start: str = ""
    episode_ends: str = "env"
    # `--from-stream` (stream_learn.py): learn from actors (`stagewise run`) that stream their steps over zenoh and
    # take the pushed policies, instead of stepping a `serve`. `actors` > 0: start that many (each `actor_envs`
    # envs at `actor_hz`) and a loopback router; 0: join the actors `robots` (comma-separated names) at
    # `stream_connect`. Policies are pushed every `push_every` s, signed with the key in `policy_secret_file`
    # (hex; "": a key made for this run, which the started actors are given).
    from_stream: bool = False
    actors: int = 1
    actor_envs: int = 4
    actor_hz: float = 50.0
    robots: str = ""
    stream_connect: str = ""
    push_every: float = 5.0
    policy_secret_file: str = ""
    # Fine-tuning: a learner run's directory (one seed) or a checkpoint.pt whose agent (weights, optimisers) this
    # run starts from; its replay, counters and curve stay there. Implies --random-steps 0 unless given.
    init: str = ""
    init_replay: bool = False  # --init also takes the source's replay: the fine-tune trains on both experiences
    success_delta: float = 0.05
    success_steps: int = 1
    agent: AgentConfig = field(default_factory=AgentConfig)
    reward_form: RewardConfig = field(default_factory=RewardConfig)

    def validate(self) -> None:
        """Raises ValueError naming the field of a set-up that cannot run."""
        a, r = self.agent, self.reward_form
        checks = [
            (self.task in TASKS, "task", f"{self.task!r} is not one of {', '.join(TASKS)}"),
            (self.reward in REWARDS, "reward", f"{self.reward!r} is not one of {', '.join(REWARDS)}"),
            (self.model is None or self.reward == "model", "model", "a reward model needs --reward model"),
            (r.shaping in SHAPINGS, "shaping", f"{r.shaping!r} is not one of {', '.join(SHAPINGS)}"),
            (r.shaping != "advice" or self.reward != "sparse", "shaping",
             "advice reads the reward model's (or oracle's) phi: it needs --reward model or oracle"),
            (r.shaping != "advice" or r.shaping_scale > 0.0, "shaping_scale", "advice needs c > 0"),
            (a.algo in ("td3", "sac"), "algo", f"{a.algo!r} is not td3 or sac"),
            (not a.gripper_binary or a.algo == "td3", "gripper_binary", "is a td3 option"),
            (not r.success_progress_one or r.shaping == "progress", "success_progress_one",
             "is a progress-shaping option (the potential form ends at potential 0)"),
            (r.potential_scale == 1.0 or r.shaping == "progress", "potential_scale",
             "is a progress-shaping option (the potential form is all potential part)"),
            (r.phi_offset == 0.0 or r.shaping == "potential", "phi_offset", "is a potential-shaping option"),
            ((r.value_horizon > 0.0) == (r.shaping == "value"), "value_horizon",
             "K > 0 (steps per whole task) is what --shaping value needs, and only it"),
            (0.0 < r.gamma <= 1.0, "gamma", f"{r.gamma} is not in (0, 1]"),
            (self.steps > 0 and self.envs > 0 and self.action_repeat > 0, "steps/envs/action_repeat",
             "must be positive"),
            (self.eval_every > 0 and self.eval_episodes > 0 and self.eval_envs > 0, "eval_every/eval_episodes/eval_envs",
             "must be positive"),
            (self.checkpoint_every >= 0, "checkpoint_every", "must be >= 0"),
            (self.eval_repeat >= 0, "eval_repeat", "must be >= 0"),
            (0.0 <= self.demo_ratio <= 1.0 and 0.0 <= self.augment_symmetry <= 1.0, "demo_ratio/augment_symmetry",
             "must lie in [0, 1]"),
            (len(a.net) > 0 and all(n > 0 for n in a.net), "net", f"{a.net} is not a list of positive widths"),
            (bool(self.serve_robot), "serve_robot", "must name the running server's --robot-name"),
            (self.obs in ("state", "embeddings", "pixels"), "obs", f"{self.obs!r} is not state, embeddings or pixels"),
            (self.obs != "embeddings" or self.reward == "model", "obs",
             "embeddings are the reward model's (`serve --embeddings`): they need --reward model"),
            (self.obs == "state" or bool(self.locator) or self.augment_symmetry == 0.0, "augment_symmetry",
             f"the symmetry maps pivot on the block's pose, which --obs {self.obs} does not have (a --locator "
             "gives it): pass 0"),
            (not self.locator or self.obs == "pixels", "locator", "is an --obs pixels option"),
            (not self.locator or self.encoder_train == "all" and not self.encoder_init, "locator",
             "replaces the encoder: no --encoder-init / --encoder-train with it"),
            (not self.locator or not self.from_stream, "locator", "is not an option of --from-stream (yet)"),
            (not self.locate_at_start or bool(self.locator), "locate_at_start", "names a --locator's positions"),
            (not self.encoder_init or self.obs == "pixels", "encoder_init", "is an --obs pixels option"),
            (0 <= self.pixel_shift <= 8, "pixel_shift", f"{self.pixel_shift} is not in 0..8 pixels"),
            (self.encoder_train in ("all", "head"), "encoder_train", f"{self.encoder_train!r} is not all or head"),
            (self.encoder_train == "all" or (self.obs == "pixels" and self.encoder_init != "random"),
             "encoder_train", "head keeps the convs as a reward model trained them: --obs pixels, not from random"),
            (self.episode_ends in ("env", "model"), "episode_ends", f"{self.episode_ends!r} is not env or model"),
            (self.episode_ends == "env" or self.reward != "sparse", "episode_ends",
             "model: success is detected on the served progress, which --reward sparse does not have"),
            (0.0 <= self.success_delta < 1.0 and self.success_steps >= 1, "success_delta/success_steps",
             "need 0 <= delta < 1 and steps >= 1"),
            (not self.from_stream or (self.demos == 0 and self.gripper_flip == 0.0 and not self.serve_endpoint
                                      and self.episode_ends == "env"), "from_stream",
             "learns from streaming actors: without --demos, --gripper-flip, --serve-endpoint or --episode-ends model"),
            (not self.from_stream or self.actors > 0 or bool(self.robots and self.stream_connect), "robots",
             "--actors 0 joins running actors: name them (--robots a,b) and where they meet (--stream-connect)"),
            (self.actors >= 0 and self.actor_envs > 0 and self.actor_hz > 0 and self.push_every > 0,
             "actors/actor_envs/actor_hz/push_every", "must be positive (actors >= 0)"),
            (not self.init_replay or bool(self.init), "init_replay", "takes the replay of an --init run: name one"),
            (not self.oracle_trap or self.reward == "oracle", "oracle_trap", "is a trap in the oracle: it needs "
             "--reward oracle"),
            (not self.oracle_trap or _is_trap(self.oracle_trap), "oracle_trap",
             f"{self.oracle_trap!r} is not Z:PHI with PHI in [0, 1] (e.g. 0.25:0.9)"),
        ]
        for ok, name, why in checks:
            if not ok:
                raise ValueError(f"config field {name}: {why}")

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["agent"]["net"] = list(self.agent.net)
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "LearnConfig":
        d = dict(d)
        agent = dict(d.pop("agent", {}))
        if "net" in agent:
            agent["net"] = tuple(agent["net"])
        return cls(agent=AgentConfig(**agent), reward_form=RewardConfig(**d.pop("reward_form", {})), **d)


def _is_trap(text: str) -> bool:
    z, sep, phi = text.partition(":")
    try:
        return bool(sep) and math.isfinite(float(z)) and 0.0 <= float(phi) <= 1.0
    except ValueError:
        return False


# What a task's shipped result set differently from the defaults (its curves.json's argv): applied under the
# flags a user gives.
TASK_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "pick-place": {
        # the progress form: the invariant ones learned slower on pick-place (docs/shaping.md, "Which form teaches")
        "reward_form.shaping": "progress", "reward_form.shaping_scale": 10.0,
        "max_steps": 300, "eval_every": 20_000, "steps": 300_000, "gripper_flip": 0.02, "gripper_flip_hold": 8,
        "gripper_flip_rise": True, "agent.gripper_binary": True, "reward_form.potential_scale": 0.1,
        "reward_form.success_progress_one": True,
    },
}


# The scale c each form was measured with (docs/lab/2026-12-06-invariant-shaping.md): the potential forms teach
# with c Phi on the scale of the task's value (c = 1 for a task reward of 1) and park at c = 10.
SHAPING_SCALE = {"progress": 10.0, "potential": 1.0, "value": 1.0, "advice": 1.0}


def build(task: str, overrides: Dict[str, Any]) -> LearnConfig:
    """The task's measured set-up with `overrides` (keys as in TASK_DEFAULTS: `field`, `agent.field`,
    `reward_form.field`) applied on top."""
    defaults = dict(TASK_DEFAULTS.get(task, {}))
    form = overrides.get("reward_form.shaping", defaults.get("reward_form.shaping", RewardConfig.shaping))
    if form != defaults.get("reward_form.shaping", RewardConfig.shaping):
        # a task's settings of its own reward form do not carry over to another form asked for
        defaults = {k: v for k, v in defaults.items() if not k.startswith("reward_form.")}
    if overrides.get("obs", "state") != "state" and not overrides.get("locator"):
        defaults["augment_symmetry"] = 0.0  # its maps read the block's pose (which a locator gives)
    if overrides.get("init"):
        defaults["random_steps"] = 0  # a trained policy explores with its own actions, not uniform ones
    values = {"reward_form.shaping_scale": SHAPING_SCALE.get(form, RewardConfig.shaping_scale), **defaults,
              **overrides, "task": task}
    top, agent, reward = {}, {}, {}
    for k, v in values.items():
        group, _, name = k.rpartition(".")
        {"": top, "agent": agent, "reward_form": reward}[group][name] = v
    cfg = LearnConfig(agent=AgentConfig(**agent), reward_form=RewardConfig(**reward), **top)
    cfg.validate()
    return cfg
