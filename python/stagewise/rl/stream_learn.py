"""`stagewise learn --from-stream` (issue 48): the learner of actors that act on their own. Each actor is a
`stagewise run` (simulated envs, or a robot over `--bridge`) at its control rate (`--hz`), streaming its steps
(`--stream-images`: every next observation, frames and state) over zenoh; the learner subscribes to them, rebuilds
observations and decisions, trains TD3 as the synchronous learner does (the same Agent, replay, n-step returns,
evaluation on held-out seeds, crash-safe checkpoints), and pushes its policy back, signed for each robot, every
`push_every` seconds. The actors never wait: at a fixed rate a full stream queue drops (counted by the actor), a
learner that is gone is a subscriber that is gone, and each actor keeps its last accepted policy.

The pushed policy explores: the deterministic actor plus Gaussian noise inside the graph (`RandomNormalLike`:
std 1 for the first `random_steps` env steps, then the TD3 noise), clipped to the action box; the evaluated and
exported policy is the deterministic one. Versions are milliseconds since the epoch, so a restarted learner's
pushes are newer than everything it pushed before (the actors refuse older versions).

Losses are counted end to end (`stream` in curves.json): `sent` (the lengths of the episodes the actors report),
`received`, `trained` (the env steps inside stored decisions), `gaps` (steps missing inside an episode), `foreign`
(transitions from a robot not listed, shaped with another gamma, or by another reward model than the learner's,
named by each transition's `reward_model`: refused, logged once per robot; a transition that names no model, from
an actor older than that field, is accepted and logged once per robot as unverifiable)."""

from __future__ import annotations

import contextlib
import copy
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

import numpy as np

from .. import launch
from ..errors import StepTimeoutError
from ..export import with_inputs
from ..policy import policy_message, public_key
from ..session import keys, open_session
from ..stream import Transition, TransitionStream
from .agent import NStep, Replay, actor_onnx
from .config import LearnConfig
from .envs import Envs, ServeError, evaluate, serve_args, shaping_args
from .train import SeedRun, train_seed_base


def manifest_sha256(path: str) -> str:
    """The `sha256` of a reward model's manifest (its ONNX's hash, as the actors' transitions name the model in
    `reward_model`), lowercase. A relative path that is not there is taken from the repository root, where the
    actors this learner starts run."""
    import tomllib

    p = Path(path)
    if not p.is_absolute() and not p.is_file():
        p = launch.repo_root() / p
    try:
        sha = tomllib.loads(p.read_text()).get("sha256")
    except (OSError, ValueError) as e:
        raise ServeError(f"reward model {path}: cannot read the manifest: {e}") from None
    if not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdefABCDEF" for c in sha)):
        raise ServeError(f"reward model {path}: the manifest's sha256 is {sha!r}, not 64 hex digits")
    return sha.lower()


def exploring_onnx(onnx_bytes: bytes, sigma: float) -> bytes:
    """The policy graph with N(0, sigma^2) noise added to its action inside the graph and the sum clipped to
    [-1, 1]: what an actor runs while its learner explores (ONNX Runtime draws the noise; metadata kept)."""
    import onnx
    from onnx import helper, numpy_helper

    if sigma <= 0.0:  # ONNX Runtime's RandomNormalLike aborts the process on scale 0: no noise, no node
        return onnx_bytes
    model = onnx.load_from_string(onnx_bytes)
    g = model.graph
    out = g.output[0].name
    for node in g.node:  # the mean action gets a new name; "action" becomes the noisy one
        node.output[:] = [f"{out}_mean" if o == out else o for o in node.output]
    g.initializer.extend([numpy_helper.from_array(np.array(-1.0, np.float32), "explore_lo"),
                          numpy_helper.from_array(np.array(1.0, np.float32), "explore_hi")])
    g.node.extend([
        helper.make_node("RandomNormalLike", [f"{out}_mean"], ["explore_noise"], scale=float(sigma),
                         dtype=onnx.TensorProto.FLOAT),
        helper.make_node("Add", [f"{out}_mean", "explore_noise"], ["explore_sum"]),
        helper.make_node("Clip", ["explore_sum", "explore_lo", "explore_hi"], [out]),
    ])
    onnx.checker.check_model(model)
    return model.SerializeToString()


class Assembler:
    """Rebuilds, per actor env (robot, env), the observations and `k`-step decisions of the streamed env steps and
    stores their n-step transitions in `out`. A step's observation is the previous step's `next_obs` (an episode's
    first step carries the reset observation); after a gap the env waits for its next decision boundary (the actor
    holds each action `k` steps from the episode's start). `mixed`: decisions whose k steps did not hold one action,
    dropped."""

    def __init__(self, k: int, nstep: int, gamma: float, out: Replay, obs_of: Callable[[dict], np.ndarray]):
        self.k, self.nstep, self.gamma, self.out, self.obs_of = k, nstep, gamma, out, obs_of
        self.win: Dict[tuple, dict] = {}
        self.received = self.trained = self.gaps = self.decisions = self.mixed = 0

    def add(self, t: Transition) -> int:
        """Takes one streamed step; returns the decisions it completed (0 or 1)."""
        self.received += 1
        key = (t.robot, t.env)
        w = self.win.get(key)
        if t.step == 0 or w is None or w["episode"] != t.episode or w["next"] != t.step:
            if w is not None and w["episode"] == t.episode and t.step > w["next"]:
                self.gaps += t.step - w["next"]
            if w is not None:
                w["ns"].flush(w["obs"], self.out)  # what was complete stays, cut (bootstrapped) where it stops
            first = t.step == 0 and t.obs is not None
            w = {"episode": t.episode, "next": t.step, "obs": self.obs_of(t.obs) if first else None, "chunk": [],
                 "ns": NStep(self.nstep, self.gamma)}
            self.win[key] = w
        o2 = self.obs_of(t.next_obs)  # checked by the caller (StreamRun._foreign)
        done = t.terminated or t.truncated
        usable = w["obs"] is not None and (w["chunk"] or t.step % self.k == 0)
        made = 0
        if usable:
            if not w["chunk"]:
                w["o0"], w["mixed"] = w["obs"], False
            elif not np.array_equal(w["chunk"][0][0], t.action):
                w["mixed"] = True
            w["chunk"].append((t.action, t.reward))
            if len(w["chunk"]) == self.k or done:
                ch = w["chunk"]
                if w["mixed"]:
                    # not one held action (a policy that does not hold the learner's repeat, e.g. an actor's
                    # `--policy random` before the first push): no decision; the n-step window is cut before it
                    self.mixed += 1
                    w["ns"].flush(w["o0"], self.out)
                else:
                    r = sum(self.gamma ** j * x for j, (_, x) in enumerate(ch))
                    w["ns"].push(w["o0"], ch[0][0], r, o2, t.terminated, done, self.out, g=self.gamma ** len(ch))
                    self.trained += len(ch)
                    self.decisions += 1
                    made = 1
                w["chunk"] = []
        w["obs"], w["next"] = o2, t.step + 1
        if done:
            del self.win[key]
        return made

    def counts(self) -> dict:
        return {"received": self.received, "trained": self.trained, "gaps": self.gaps, "decisions": self.decisions,
                "mixed_actions": self.mixed}


class StreamRun(SeedRun):
    """One learner of streaming actors (`robots`), on the zenoh endpoint `connect`. With `actors` > 0 it starts a
    loopback router and that many `stagewise run` actors itself (children that die with it), named
    `<robot prefix>-<i>`; else it joins actors already running. `secret`: the policy signing key (hex), whose public
    key the actors were started with (spawned actors get it)."""

    def __init__(self, cfg: LearnConfig, seed: int, out: Path, robots: List[str], connect: str, secret: Optional[str],
                 actors: int = 0, actor_envs: int = 4, hz: float = 50.0, push_every: float = 5.0,
                 report: Optional[Callable] = None):
        super().__init__(cfg, seed, out, (), report)
        self.robots, self.connect, self.secret = list(robots), connect, secret
        self.n_actors, self.actor_envs, self.hz, self.push_every = actors, actor_envs, hz, push_every
        self.version = 0
        self.pushed = {"versions": 0, "unmatched": 0}
        self.foreign: Dict[str, int] = {}
        self.sent: Dict[tuple, int] = {}  # (robot, env, episode) -> length, from the actors' episode messages
        self._expected: Optional[Tuple[str, str]] = None  # (sha256, manifest) of the actors' reward model, read once
        self.unverified: Set[str] = set()  # robots whose transitions name no reward model (older actors)

    # ------------------------------------------------------------------------------------------- set-up
    def reward_model(self) -> Optional[str]:
        """The actors' reward model (--model, else the task's shipped one, as `stagewise run` takes it): its
        encoder starts a pixel policy's (its evaluation server serves no reward)."""
        if self.cfg.reward != "model":
            return None
        return self.cfg.model or str(launch.repo_root() / "models" / self.cfg.task / f"{self.cfg.task}-progress.toml")

    def expected_model(self) -> Tuple[str, str]:
        """(sha256, manifest path) of :meth:`reward_model` (with --reward model), the manifest read once: what the
        actors' transitions must name in `reward_model`."""
        if self._expected is None:
            path = self.reward_model()
            if path is None:
                raise ServeError(f"--reward {self.cfg.reward} has no reward model")
            self._expected = (manifest_sha256(path), path)
        return self._expected

    def _actor_args(self, i: int, endpoint: str, policy: Path) -> List[str]:
        cfg = self.cfg
        args = ["--task", cfg.task, "--reward", cfg.reward, "--envs", str(self.actor_envs), "--robot-name",
                self.robots[i], "--stream-images", "--width", str(cfg.width), "--height", str(cfg.height),
                "--policy", str(policy), "--episodes", "0", "--hz", repr(self.hz), "--max-steps", str(cfg.max_steps),
                "--seed", str(train_seed_base(self.seed) + 100_000_000 * i), "--connect", endpoint, "--client",
                "--gamma", repr(cfg.reward_form.gamma), "--shaping-scale", repr(cfg.reward_form.shaping_scale),
                "--log-file", str(self.dir / "actors" / f"{self.robots[i]}.swlog"), "--log", "warn"]
        if cfg.model:
            args += ["--model", cfg.model]
        if self.secret:
            args += ["--policy-key", public_key(self.secret).hex()]
        return args + shaping_args(cfg)

    @contextlib.contextmanager
    def _actors(self, logs: Path):
        """The router and actors this learner starts (none when it joins running ones): yields the endpoint."""
        if not self.n_actors:
            yield self.connect
            return
        port = launch.free_port()
        endpoint = f"tcp/127.0.0.1:{port}"
        procs = []
        router_log = logs / "router.log"
        router = subprocess.Popen([sys.executable, "-m", "stagewise.rl.router", endpoint],
                                  stdout=open(router_log, "wb"), stderr=subprocess.STDOUT,
                                  preexec_fn=launch._die_with_parent)
        procs.append(router)
        self.children = []
        try:
            deadline = time.monotonic() + 60
            while "listening" not in router_log.read_text(errors="replace"):  # clients need it up to start
                if router.poll() is not None or time.monotonic() > deadline:
                    raise ServeError(f"the zenoh router did not start ({router_log}): "
                                     f"{router_log.read_text(errors='replace')[-500:]}")
                time.sleep(0.1)
            (self.dir / "actors").mkdir(parents=True, exist_ok=True)
            first = self._export(self.dir / "actors", "initial", "the learner's first policy, exploring")
            initial = first.with_suffix(".onnx")
            initial.write_bytes(exploring_onnx(initial.read_bytes(), 1.0))
            first.write_text(_rehash(first.read_text(), initial.read_bytes()))
            for i in range(self.n_actors):
                log = logs / f"actor-{i}.log"
                p = subprocess.Popen([launch.find_binary(), "run", *self._actor_args(i, endpoint, first)],
                                     stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                     preexec_fn=launch._die_with_parent, cwd=launch.repo_root())
                procs.append(p)
                self.children.append((p, log))
            yield endpoint
        finally:
            for p, _ in self.children:  # Ctrl-C: an actor stops between steps and prints what it sent
                p.send_signal(signal.SIGINT)
            for p in procs:
                if p is router:
                    continue
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
            router.terminate()
            router.wait(10)
            self.actor_reports = [actor_report(log.read_text(errors="replace")) | {"robot": r}
                                  for (_, log), r in zip(self.children, self.robots)]

    # ------------------------------------------------------------------------------------------- the run
    def run(self, resume: bool) -> dict:
        cfg = self.cfg
        self.t0 = time.time()
        logs = self.dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        tag = f"{len(list(logs.glob('serve-eval*.log')))}"
        eval_max = cfg.eval_max_steps if cfg.eval_max_steps >= 0 else cfg.max_steps
        with launch.serve(*serve_args(cfg, "sparse", self.eval_robot, cfg.eval_envs, eval_max),
                          log=str(logs / f"serve-eval{tag}.log"), die_with_parent=True) as esrv:
            self.evals = Envs(esrv.endpoint, self.eval_robot, cfg.eval_envs, None, esrv, obs=cfg.obs)
            try:
                self._build(self.evals.envs[0])
                if resume and (self.dir / "checkpoint.pt").exists():
                    from . import checkpoint as ckpt

                    self.load_state_dict(ckpt.load(self.dir / "checkpoint.pt"))
                elif cfg.init:
                    self.init_from(cfg.init)
                self.assembler = Assembler(cfg.action_repeat, cfg.nstep, cfg.reward_form.gamma, self.buf,
                                           self._obs_of(self.evals.envs[0]))
                with self._actors(logs) as endpoint:
                    self.session = open_session(endpoint)
                    self.stream = TransitionStream("*", session=self.session, episodes=True)
                    self.pubs = {r: self.session.declare_publisher(keys(r)["policy"]) for r in self.robots}
                    try:
                        self._stream_loop()
                    finally:
                        self.stream.close()
                        self.session.close()
                self._evaluate(self.step)
                self.last = str(self._export(self.policy_dir, self._name(),
                                             self._describe(f"{self.step} streamed env steps")))
            finally:
                self.evals.close()
        self.save_checkpoint(done=True)
        return self.record(done=True)

    def _evaluate(self, step: int) -> None:
        """While streaming, an evaluation runs beside the learner, on a copy of the agent taken at `step` (the
        actors do not stop for it, so neither does the learner); one at a time: a due evaluation while one runs
        is skipped. At the end (no stream), the final one as the synchronous learner does it."""
        if not getattr(self, "streaming", False):
            self._finish_eval(wait=True)
            return super()._evaluate(step)
        if self._finish_eval(wait=False) is not None or (self.log and self.log[-1]["steps"] == step):
            return
        snapshot = copy.deepcopy(self.agent)
        result: dict = {}

        def work():
            te = time.time()
            try:
                result["ev"] = evaluate(snapshot, self.evals, self.eval_seeds(),
                                        self.cfg.eval_repeat or self.cfg.action_repeat)
            except Exception as e:  # noqa: BLE001 - reported on the learner's thread
                result["error"] = e
            result["s"] = time.time() - te

        thread = threading.Thread(target=work, name=f"eval-{step}", daemon=True)
        self.pending_eval = (thread, step, snapshot, result, self.wall())
        thread.start()

    def _finish_eval(self, wait: bool):
        """Records a background evaluation that finished (or, with `wait`, waits for it); returns the one still
        running, else None."""
        pending = getattr(self, "pending_eval", None)
        if pending is None:
            return None
        thread, step, snapshot, result, wall = pending
        if wait:
            thread.join()
        if thread.is_alive():
            return pending
        self.pending_eval = None
        if "error" in result:
            raise result["error"]
        self.timing["eval_s"] += result["s"]
        self._record_eval(step, result["ev"], snapshot, wall)
        return None

    def _obs_of(self, env) -> Callable[[dict], np.ndarray]:
        """What the learner stores of a streamed observation: the state (--obs state) or the frames and
        proprioception (--obs pixels), as LearnerEnv makes them of a served one."""
        if self.cfg.obs == "state":
            return lambda o: np.asarray(o["state"], np.float32)
        from .pixels import frames_vector

        spec, idx = env.pixels, env.proprio
        return lambda o: np.concatenate([frames_vector(o["images"], spec),
                                         np.asarray(o["state"], np.float32)[idx]]).astype(np.float32)

    def _stream_loop(self) -> None:
        cfg, last_push, last_data = self.cfg, 0.0, time.monotonic()
        self._push()
        self.streaming = True
        try:
            self._stream_steps(last_push, last_data)
        finally:
            self.streaming = False

    def _stream_steps(self, last_push: float, last_data: float) -> None:
        cfg = self.cfg
        while self.step < cfg.steps:
            self._finish_eval(wait=False)
            if self.step >= self.next_eval:
                self._evaluate(self.step)
                self.next_eval += cfg.eval_every
            if cfg.checkpoint_every and self.step >= self.next_ckpt:
                self.next_ckpt += cfg.checkpoint_every
                self.save_checkpoint(done=False)
            for p, log in getattr(self, "children", []):
                if p.poll() is not None:
                    tail = log.read_text(errors="replace").strip().splitlines()[-6:]
                    raise ServeError(f"actor {log.stem} exited ({p.returncode}); its log {log}:\n" + "\n".join(tail))
            te = time.time()
            got = self._drain(0.05)
            self.timing["env_s"] += time.time() - te
            now = time.monotonic()
            if got:
                last_data = now
            elif now - last_data > 120:
                raise ServeError(f"no transition from {', '.join(self.robots)} for 120 s (refused: {self.foreign}; "
                                 f"the logs: {self.dir / 'logs'})")
            tu = time.time()
            self._learn_for(0.25)
            self.timing["update_s"] += time.time() - tu
            if now - last_push >= self.push_every:
                self._push()
                last_push = now
            self.report(self.step, self.log[-1]["success"] if self.log else None)

    def _drain(self, seconds: float) -> int:
        """Takes what the stream holds (waiting up to `seconds` for the first); returns the env steps taken."""
        n, deadline = 0, time.monotonic() + seconds
        while True:
            try:
                t = self.stream.recv(timeout=max(deadline - time.monotonic(), 0.0) if n == 0 else 0.0)
            except StepTimeoutError:
                break
            why = self._foreign(t)
            if why:
                self._refuse(why[0], why[1])
                continue
            self.debt += self.cfg.utd * self.assembler.add(t)
            self.step += 1
            n += 1
            if n >= 5000:
                break
        while True:  # the actors' finished episodes: what they sent
            try:
                e = self.stream.episodes(timeout=0.0)
            except StepTimeoutError:
                break
            if e.get("robot") in self.robots:
                self.sent[(e["robot"], int(e["env"]), int(e["episode"]))] = int(e["length"])
                self.episodes.append((self.step, bool(e["success"]), float(e.get("final_phi") or 0.0),
                                      int(e["length"]), float(e["return"]), bool(e["success"])))
        return n

    def _foreign(self, t: Transition):
        """(who, why) when `t` is not this learner's to train on: a robot not listed, a step shaped with another
        gamma or scale than the learner's reward (potential-based shaping keeps the optimal policy only when the
        learner's gamma is the shaper's), or by another reward model (`t.reward_model`, the sha256 of the model's
        ONNX, against the learner's model's manifest; with --reward oracle|sparse, by any model); None when it is.
        A transition that names no model (an actor older than the field) cannot be checked: accepted, and logged
        once per robot."""
        r = self.cfg.reward_form
        if t.robot not in self.robots:
            return t.robot, f"transitions from robot {t.robot!r}, which is not one of --robots {','.join(self.robots)}"
        if self.cfg.reward != "sparse" and (abs(t.gamma - r.gamma) > 1e-9 or abs(t.shaping_scale - r.shaping_scale)
                                            > 1e-9):
            return (f"{t.robot}:shaping", f"{t.robot}: transitions shaped with gamma {t.gamma} and c "
                    f"{t.shaping_scale}, this learner's reward has gamma {r.gamma} and c {r.shaping_scale}")
        why = self._other_model(t)
        if why:
            return f"{t.robot}:model", why
        if t.next_obs is None or (t.step == 0 and t.obs is None):
            return (f"{t.robot}:observations", f"{t.robot}: transitions without observations (start the actor "
                    "with --stream-images)")
        try:
            self.assembler.obs_of(t.next_obs)
        except (KeyError, ValueError, TypeError) as e:
            return f"{t.robot}:observations", f"{t.robot}: an observation the learner cannot read ({e})"
        return None

    def _other_model(self, t: Transition) -> Optional[str]:
        """Why `t`'s reward is another model's than the learner's (see :meth:`_foreign`), or None."""
        if self.cfg.reward != "model":
            if t.reward_model is None:
                return None
            return (f"{t.robot}: transitions shaped by reward model {t.reward_model[:12]}, this learner's reward is "
                    f"--reward {self.cfg.reward} (no model's)")
        sha, path = self.expected_model()
        if t.reward_model is None:
            if t.robot not in self.unverified:
                self.unverified.add(t.robot)
                print(f"learner: {t.robot}: transitions name no reward model (an actor older than the field): "
                      f"accepted, unverifiable against this learner's {sha[:12]} ({path})", flush=True)
            return None
        if t.reward_model != sha:
            return (f"{t.robot}: transitions shaped by reward model {t.reward_model[:12]}, this learner's is "
                    f"{sha[:12]} ({path})")
        return None

    def _refuse(self, who: str, why: str) -> None:
        if who not in self.foreign:
            print(f"learner: refused: {why} (counted as foreign from now on)", flush=True)
        self.foreign[who] = self.foreign.get(who, 0) + 1

    def _learn_for(self, seconds: float) -> None:
        cfg = self.cfg
        if self.step < cfg.learning_starts or self.buf.n < cfg.batch:
            return
        deadline = time.monotonic() + seconds
        while self.debt >= 1.0 and time.monotonic() < deadline:
            self.debt -= 1.0
            batch = self.buf.sample(cfg.batch)
            self.agent.update(self.symmetry(batch) if self.symmetry else batch,
                              actor_step=(self.agent.updates % cfg.actor_every == 0))

    def _push(self) -> None:
        """The exploring policy, signed for each robot, on its policy key; a robot with no subscriber (an actor
        not up yet, or gone) is counted and skipped: the learner never waits for an actor."""
        sigma = 1.0 if self.step < self.cfg.random_steps else self.agent.noise
        # the graph names its inputs (state fields, frames or embeddings) in its metadata: the actor binds them
        onnx = exploring_onnx(with_inputs(actor_onnx(self.agent), state_names=self.export_names,
                                          pixels=self.export_pixels, embeddings=self.export_embeddings,
                                          action_repeat=self.cfg.action_repeat), sigma)
        self.version = max(self.version + 1, time.time_ns() // 1_000_000)
        for robot, pub in self.pubs.items():
            if not pub.matching_status.matching:
                self.pushed["unmatched"] += 1
                continue
            pub.put(policy_message(onnx, self.version, self.secret, robot=robot))
        self.pushed["versions"] += 1

    # ------------------------------------------------------------------------------------------- files
    def state_dict(self) -> dict:
        self.obs = []  # no served envs: the assembler's windows restart at the actors' next episodes
        d = super().state_dict()
        d["stream"] = {"version": self.version, "pushed": self.pushed, "foreign": self.foreign,
                       "sent": list(self.sent.items()), "counts": self.assembler.counts()}
        return d

    def load_state_dict(self, d: dict) -> None:
        super().load_state_dict({**d, "nsteps": [], "obs": []})
        s = d.get("stream") or {}
        self.version, self.pushed = s.get("version", 0), s.get("pushed", self.pushed)
        self.foreign, self.sent = s.get("foreign", {}), dict((tuple(k), v) for k, v in s.get("sent", []))
        self.resumed_counts = s.get("counts", {})

    def record(self, done: bool) -> dict:
        rec = super().record(done)
        a = getattr(self, "assembler", None)
        counts = a.counts() if a is not None else {}
        before = getattr(self, "resumed_counts", {})
        counts = {k: counts.get(k, 0) + before.get(k, 0) for k in set(counts) | set(before)}
        rec["stream"] = {"robots": self.robots, "actors": self.n_actors, "actor_envs": self.actor_envs,
                         "hz": self.hz, "sent": sum(self.sent.values()), "episodes_sent": len(self.sent),
                         **counts, "foreign": dict(self.foreign), "policy_versions": self.pushed["versions"],
                         "push_unmatched": self.pushed["unmatched"], "updates_per_s": self.own_updates() /
                         max(self.timing["update_s"], 1e-9), "actor_reports": getattr(self, "actor_reports", [])}
        return rec


def actor_report(log: str) -> dict:
    """What a `stagewise run` said it sent when it stopped (its last `stream:` line): transitions sent and dropped
    (a full queue at a fixed rate), policies accepted and rejected; {} when it printed none."""
    m = re.findall(r"stream: (\d+) transitions sent, (\d+) dropped.*policies: (\d+) accepted, (\d+) rejected", log)
    if not m:
        return {}
    sent, dropped, accepted, rejected = (int(x) for x in m[-1])
    return {"sent": sent, "dropped": dropped, "policies_accepted": accepted, "policies_rejected": rejected}


def _rehash(manifest: str, onnx_bytes: bytes) -> str:
    """`manifest` with its sha256 line set to that of `onnx_bytes`."""
    import hashlib

    lines = [f'sha256 = "{hashlib.sha256(onnx_bytes).hexdigest()}"' if ln.startswith("sha256 = ") else ln
             for ln in manifest.splitlines()]
    return "\n".join(lines) + "\n"

