"""The learner package `stagewise.rl`, seeded and CI-sized: `python -m stagewise.rl --smoke` starts `stagewise
serve` (training: the shipped push-target reward model; evaluation: a second, sparse server), trains its TD3 for
3000 env steps, evaluates on held-out seeds, and writes its curve files and ONNX policies; plus the learner's parts
(n-step returns, export, symmetry maps, gripper options). The learning targets themselves are benchmark figures
(docs/lab/learner_shaping.md), not tests. Crash-safety and bad inputs: test_learner_resume.py."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from stagewise import rl
from stagewise.rl import AgentConfig, cli, runner
from stagewise.rl.plot import run_label

TD3 = AgentConfig()
ROOT = Path(__file__).resolve().parents[2]


def _agent_cfg(**kw) -> AgentConfig:
    return dataclasses.replace(TD3, **kw)


def test_nstep_returns_and_bootstrap_factors():
    buf = rl.Replay(16, 1, 1)
    g = 0.9
    ns = rl.NStep(3, g)
    rewards = [1.0, 2.0, 3.0, 4.0]
    for t, r in enumerate(rewards):
        last = t == len(rewards) - 1
        ns.push(np.array([t]), np.array([0.0]), r, np.array([t + 1]), terminated=last, done=last, out=buf)
    assert buf.n == 4 and buf.added == 4
    # s0: r0 + g r1 + g^2 r2, bootstrapped from s3 with g^3; s1 the same from s4 (the terminal step: factor 0).
    np.testing.assert_allclose(buf.r[:4].numpy(), [1 + g * 2 + g * g * 3, 2 + g * 3 + g * g * 4, 3 + g * 4, 4],
                               rtol=1e-6)
    np.testing.assert_allclose(buf.disc[:4].numpy(), [g ** 3, 0, 0, 0], rtol=1e-6)
    np.testing.assert_array_equal(buf.s2[:4, 0].numpy(), [3, 4, 4, 4])


def test_the_reward_form_is_asked_of_the_server_with_the_runtime_flags():
    """The learner re-shapes nothing: its reward form becomes the training server's flags (the runtime's contract),
    the evaluation server stays sparse, and options of the other form are refused before anything starts."""
    prog = rl.build("push-target", {"reward": "model", "reward_form.shaping": "progress",
                                    "reward_form.potential_scale": 0.1, "reward_form.success_progress_one": True})
    train = rl.serve_args(prog, "model", "r", 4, 200)
    assert train[train.index("--shaping"):] == ["--shaping", "progress", "--potential-scale", "0.1",
                                                "--success-progress-one"]
    assert train[train.index("--shaping-scale") + 1] == "10.0" and train[train.index("--gamma") + 1] == "0.99"
    assert "--shaping" not in rl.serve_args(prog, "sparse", "r-eval", 10, 0)
    assert rl.shaping_args(dataclasses.replace(prog, reward="sparse")) == []
    pot = rl.build("push-target", {"reward": "oracle", "reward_form.shaping": "potential"})
    assert rl.shaping_args(pot) == []  # the served default: works with any runtime
    off = rl.build("push-target", {"reward": "oracle", "reward_form.shaping": "potential",
                                   "reward_form.phi_offset": 1.0})
    assert rl.shaping_args(off) == ["--shaping", "potential", "--phi-offset", "1.0"]
    for bad in ({"reward_form.success_progress_one": True}, {"reward_form.potential_scale": 0.5}):
        with pytest.raises(ValueError, match="progress-shaping option"):
            rl.build("push-target", {"reward_form.shaping": "potential", **bad})
    with pytest.raises(ValueError, match="phi_offset"):
        rl.build("push-target", {"reward_form.shaping": "progress", "reward_form.phi_offset": 1.0})


def test_a_server_serving_another_reward_than_asked_is_named():
    from stagewise.rl.envs import reward_mismatch

    cfg = rl.build("pick-place", {"reward": "model"})
    served = {"source": "model", "gamma": 0.99, "shaping_scale": 10.0, "shaping": "progress", "potential_scale": 0.1,
              "success_progress_one": True}
    assert reward_mismatch(cfg, served) == []
    assert reward_mismatch(cfg, {**served, "potential_scale": 1.0}) == ["potential_scale: serves 1.0, asked 0.1"]
    # an older server (no `shaping`) shaped with the potential form, offset 0
    old = {"source": "oracle", "gamma": 0.99, "shaping_scale": 10.0}
    pot = rl.build("push-target", {"reward": "oracle", "reward_form.shaping": "potential",
                                   "reward_form.shaping_scale": 10.0})
    assert reward_mismatch(pot, old) == []
    # the potential forms' own default c is 1 (the scale they teach at)
    assert rl.build("push-target", {"reward": "oracle", "reward_form.shaping": "potential"}).reward_form.shaping_scale == 1.0
    assert reward_mismatch(rl.build("push-target", {"reward": "oracle", "reward_form.shaping": "progress"}), old) == [
        "shaping: serves 'potential', asked 'progress'", "potential_scale: serves None, asked 1.0",
        "success_progress_one: serves None, asked False"]
    assert reward_mismatch(dataclasses.replace(pot, reward="sparse"), {"source": "sparse"}) == []
    assert reward_mismatch(pot, {"source": "sparse"}) == ["source: serves 'sparse', asked 'oracle'",
                                                         "shaping_scale: serves None, asked 10.0"]


def test_task_defaults_are_the_shipped_set_ups_and_flags_win():
    pick = rl.build("pick-place", {"reward": "model"})
    assert (pick.max_steps, pick.gripper_flip, pick.gripper_flip_hold, pick.gripper_flip_rise) == (300, 0.02, 8, True)
    assert pick.agent.gripper_binary and pick.reward_form.potential_scale == 0.1
    assert pick.reward_form.success_progress_one
    # the default follows the figures: the invariant potential form at c = 1 on push-target (and where a task
    # measured nothing else); pick-place keeps its measured progress form until the invariant one is measured there
    push = rl.build("push-target", {"reward": "model"})
    assert (push.reward_form.shaping, push.reward_form.shaping_scale, push.max_steps) == ("potential", 1.0, 200)
    assert (pick.reward_form.shaping, pick.reward_form.shaping_scale) == ("progress", 10.0)
    pick_pot = rl.build("pick-place", {"reward": "model", "reward_form.shaping": "potential"})
    assert (pick_pot.reward_form.shaping_scale, pick_pot.reward_form.potential_scale) == (1.0, 1.0)
    assert not pick_pot.reward_form.success_progress_one and pick_pot.max_steps == 300
    args = cli.parse(["--task", "pick-place", "--reward", "model", "--out", "x", "--no-gripper-binary",
                      "--potential-scale", "1"])
    given = runner.resolve(args)[0]
    assert not given.agent.gripper_binary and given.reward_form.potential_scale == 1.0 and given.max_steps == 300


def test_exported_policy_is_the_deterministic_actor(tmp_path):
    import onnxruntime as ort

    names = ["ee_x", "ee_y", "ee_z", "gripper_width", "grasped"] + [f"block0_{f}" for f in
                                                                      ["x", "y", "z", "qw", "qx", "qy", "qz"]]
    names += ["target_x", "target_y"]
    agent = rl.Agent(names, 4, _agent_cfg(net=(32, 16)), seed=1)
    manifest = rl.export_policy(agent, tmp_path, "p", task="push-target", state_names=names, description="test")
    text = manifest.read_text()
    assert text.count('state = "state"') == 1 and 'task = "push-target"' in text and "state_size = 14" in text
    x = np.random.default_rng(2).normal(scale=0.2, size=(9, len(names))).astype(np.float32)
    sess = ort.InferenceSession(str(tmp_path / "p.onnx"))
    (y,) = sess.run(["action"], {"state": x})
    np.testing.assert_allclose(y, agent.act(x, deterministic=True), atol=1e-5)
    assert "stagewise.action_repeat" not in sess.get_modelmeta().custom_metadata_map
    # trained with each action held 4 steps: the graph says so, and the runtime holds them as long
    rl.export_policy(agent, tmp_path, "p4", task="push-target", state_names=names, description="test",
                     action_repeat=4)
    meta = ort.InferenceSession(str(tmp_path / "p4.onnx")).get_modelmeta().custom_metadata_map
    assert meta["stagewise.action_repeat"] == "4"


def test_smoke_run_trains_evaluates_and_writes_curves(tmp_path, binary):
    import onnxruntime as ort

    out = tmp_path / "run"
    runs = runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "model", "--seeds", "3",
                                   "--eval-repeat", "2", "--out", str(out)]))
    assert len(runs) == 1
    run = runs[0]
    steps = [c["steps"] for c in run["checkpoints"]]
    # 4 envs, each action held 4 env steps (the default): 16 env steps per decision of all envs
    assert steps == [0, 1504, 3008]
    for c in run["checkpoints"]:
        assert 0.0 <= c["success"] <= 1.0 and c["episodes"] == 5
        assert 0.0 <= c["final_progress"] <= 1.0
    # utd 0.5 per decision of each of the 4 envs (2 updates per vec step of 16 env steps), from the first vec step
    # after learning-starts at which the buffer holds a batch (256 3-step transitions: 4 per vec step, less the 2
    # each env's n-step window still holds: vec step 66, env step 1056) to the last (188, env step 3008)
    assert run["updates"] == (188 - 66 + 1) * 2
    # every decision is one transition: 188 vec steps x 4 envs, less the 2 each env's n-step window still holds
    # (the 100-step episodes are 25 decisions: the last one, decision 188, is mid-episode)
    assert (run["env_steps"], run["decisions"], run["replay_added"]) == (3008, 188 * 4, 188 * 4 - 4 * 2)
    assert run["train_episodes"] >= 3000 // 100 - 4  # 100-step episodes, 4 envs (their last ones unfinished)
    assert math.isfinite(run["checkpoints"][-1]["q"]) and run["done"] and run["resumed_from"] == []
    saved = json.loads((out / "curves.json").read_text())
    assert [(c["steps"], c["success"]) for c in saved["runs"][0]["checkpoints"]] == \
        [(c["steps"], c["success"]) for c in run["checkpoints"]]
    assert saved["config"]["task"] == "push-target" and "--smoke" in saved["argv"]
    assert (out / "curves.png").stat().st_size > 10_000
    # The exported policy: state in, action out, the deterministic action in [-1, 1].
    manifest = (out / "seed-3" / "policy" / "push-target-model-3.toml").read_text()
    assert 'kind = "policy"' in manifest and "state_size = 14" in manifest
    assert run["last"] == str(out / "seed-3" / "policy" / "push-target-model-3.toml")
    sess = ort.InferenceSession(str(out / "seed-3" / "policy" / "push-target-model-3.onnx"))
    x = np.random.default_rng(0).normal(size=(7, 14)).astype(np.float32)
    (y,) = sess.run(["action"], {"state": x})
    assert y.shape == (7, 4) and np.all(np.abs(y) <= 1.0)
    assert sess.get_modelmeta().custom_metadata_map["stagewise.action_repeat"] == "4"
    # the runtime takes the policy directory as it is
    report = tmp_path / "eval.json"
    subprocess.run([binary, "--log", "warn", "eval", "policy", "--policy", run["last"], "--task", "push-target",
                    "--episodes", "2", "--json", str(report)], check=True, capture_output=True, timeout=300)
    assert json.loads(report.read_text())["action_repeat"] == 4


def test_symmetry_maps_keep_distances_yaw_and_the_action_box():
    """--augment-symmetry: each of the eight maps keeps every distance between ee, block and target, turns a block's
    yaw by the map's angle (or mirrors it), keeps a free-moving gripper's displacement equal to its mapped action's,
    and takes the action box onto itself; P = 0 changes nothing."""

    names = ["ee_x", "ee_y", "ee_z", "gripper_width", "grasped", "block0_x", "block0_y", "block0_z", "block0_qw",
             "block0_qx", "block0_qy", "block0_qz", "target_x", "target_y"]
    n = 256
    g = torch.Generator().manual_seed(0)
    s = torch.rand(n, len(names), generator=g) * 0.6 - 0.3
    yaw = torch.rand(n, generator=g) * 0.7 - 0.35
    s[:, 8:12] = torch.stack([torch.cos(yaw / 2), torch.zeros(n), torch.zeros(n), torch.sin(yaw / 2)], 1)
    a = torch.rand(n, 4, generator=g) * 2 - 1
    a[: n // 2, :2] = torch.sign(a[: n // 2, :2])  # corners of the box
    s2 = s.clone()
    s2[:, 0:2] += 0.024 * a[:, 0:2]  # the gripper moved freely: 4 steps of 6 mm at full command
    r, disc = torch.rand(n, generator=g), torch.rand(n, generator=g)
    sym = rl.Symmetry(names, 1.0)
    ms, ma, mr, ms2, md = sym((s, a, r, s2, disc), torch.Generator().manual_seed(1))
    assert torch.equal(mr, r) and torch.equal(md, disc)

    def dist(x, i, j):
        return torch.hypot(x[:, i] - x[:, j], x[:, i + 1] - x[:, j + 1])

    for i, j in [(0, 5), (5, 12), (0, 12)]:
        torch.testing.assert_close(dist(ms, i, j), dist(s, i, j), atol=1e-6, rtol=0)
    torch.testing.assert_close(ms[:, [2, 3, 4, 7]], s[:, [2, 3, 4, 7]])
    torch.testing.assert_close(ms[:, 5:7], s[:, 5:7])  # the pivot stays
    torch.testing.assert_close(ms2[:, 0:2] - ms[:, 0:2], 0.024 * ma[:, 0:2], atol=1e-6, rtol=0)
    assert ma.abs().max() <= 1.0 and torch.equal(ma[:, 2:], a[:, 2:])
    torch.testing.assert_close(ma[:, :2].abs().sort(1).values, a[:, :2].abs().sort(1).values)
    torch.testing.assert_close(ms[:, 8:12].norm(dim=1), torch.ones(n))
    # the mapped yaw is +-yaw + k * 90 degrees: the block's x axis turned like any direction in the plane
    new_yaw = 2 * torch.atan2(ms[:, 11], ms[:, 8])
    ex = torch.stack([torch.cos(yaw), torch.sin(yaw)], 1)
    probe_s = s.clone()
    probe_s[:, 0:2] = s[:, 5:7] + 0.05 * ex  # a point on the block's x axis
    probe = sym((probe_s, a, r, probe_s, disc), torch.Generator().manual_seed(1))[0]
    turned = (probe[:, 0:2] - probe[:, 5:7]) / 0.05
    cross = turned[:, 0] * torch.sin(new_yaw) - turned[:, 1] * torch.cos(new_yaw)
    assert cross.abs().max() < 1e-5  # the block's new x axis lies along the turned probe (up to its sign)
    same = rl.Symmetry(names, 0.0)((s, a, r, s2, disc), torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(same, (s, a, r, s2, disc)))


def test_gripper_flip_sets_the_other_extreme_in_a_share_of_rows_and_nothing_else():
    rng = np.random.default_rng(1)
    acts = rng.uniform(-1, 1, (20000, 4)).astype(np.float32)
    before = acts.copy()
    rl.GripperFlip(len(acts), 3, 0.05)(acts, np.random.default_rng(2))
    changed = acts[:, 3] != before[:, 3]
    assert 0.04 < changed.mean() < 0.06
    assert np.array_equal(acts[:, :3], before[:, :3])
    assert np.all(acts[changed, 3] == np.where(before[changed, 3] > 0, -1.0, 1.0))
    # a shut gripper (the saturated actor's -0.93) is flipped wide open: past the release threshold
    shut = np.full((1000, 4), -0.93, np.float32)
    rl.GripperFlip(len(shut), 3, 1.0)(shut, rng)
    assert np.all(shut[:, 3] == 1.0)


def test_a_held_gripper_flip_lasts_its_decisions_then_the_actor_has_the_gripper_again():
    flip = rl.GripperFlip(1, 3, 1.0, hold=3)
    draws = np.random.default_rng(0)  # p = 1: the first draw starts a flip
    seen = []
    for t in range(4):
        acts = np.array([[0.1, 0.2, 0.3, -0.9 if t < 2 else 0.7]], np.float32)
        flip(acts, draws if t < 3 else _NoDraw())
        seen.append(float(acts[0, 3]))
    # flipped open at t = 0 and held for 3 decisions whatever the actor says (t = 2: +0.7 stays +1, the held value);
    # at t = 3 the hold is over and no new flip is drawn
    assert seen == [1.0, 1.0, 1.0, float(np.float32(0.7))]
    # a hold ends with the episode
    flip = rl.GripperFlip(1, 3, 1.0, hold=3)
    flip(np.array([[0, 0, 0, -0.9]], np.float32), draws)
    flip.end_episode(0)
    acts = np.array([[0, 0, 0, -0.9]], np.float32)
    flip(acts, _NoDraw())
    assert float(acts[0, 3]) == float(np.float32(-0.9))
    # --gripper-flip-rise: an opening flip also lifts the hand (column 2, dz) while it holds; a shutting one does not
    flip = rl.GripperFlip(2, 3, 1.0, hold=2, rise=2)
    acts = np.array([[0.1, 0.2, -0.5, -0.9], [0.1, 0.2, -0.5, 0.9]], np.float32)
    flip(acts, np.random.default_rng(0))
    assert acts[0].tolist() == [np.float32(0.1), np.float32(0.2), 1.0, 1.0]
    assert acts[1].tolist() == [np.float32(0.1), np.float32(0.2), np.float32(-0.5), -1.0]


class _GripCritic(torch.nn.Module):
    """A fixed critic pair: Q(s, a) = k(s) if the gripper opens (a_grip > 0.1, the release threshold), else 0, with
    k(s) = the first feature (its sign says whether opening pays): a step in a_grip, whose gradient is 0 everywhere;
    plus a zero-weight parameter for the optimiser."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        q = x[:, 0] * (x[:, -1] > 0.1).float() + 0.0 * self.w
        return torch.stack([q, q])


_NAMES = ["ee_x", "ee_y", "ee_z", "gripper_width", "grasped"]


def _on_fixed_critic(agents, critic, seed):
    """Gives each agent the fixed critic (as its critic and target); returns 256 random states, their features, k
    (the first feature: whether opening pays) and a next action that holds the gripper shut and the hand still."""
    for ag in agents:
        ag.q, ag.q_targ = critic(), critic()
    s = torch.as_tensor(np.random.default_rng(seed).normal(size=(256, len(_NAMES))), dtype=torch.float32)
    f = agents[0].features(s)
    a2 = torch.zeros(256, 4)
    a2[:, 3] = -0.9
    return s, f, f[:, 0], a2


def test_a_binary_gripper_takes_the_better_choice_in_the_target_and_teaches_the_actor_it():
    agent = rl.Agent(_NAMES, 4, _agent_cfg(net=(32, 32), gripper_binary=True, lr=3e-3), seed=0, grip=3)
    plain = rl.Agent(_NAMES, 4, _agent_cfg(net=(32, 32)), seed=0, grip=3)
    assert plain.grip is None  # the gripper column alone does not make it binary
    s, f, k, a2 = _on_fixed_critic((agent, plain), _GripCritic, seed=3)
    # target: the better of shut (0) and open (k); the plain learner values the actor's own shut gripper
    torch.testing.assert_close(agent.next_value(f, a2), k.clamp(min=0.0))
    torch.testing.assert_close(plain.next_value(f, a2), torch.zeros(256))
    # actor: where opening pays (k > 0) its gripper output goes past the threshold, elsewhere below it; the plain
    # actor's gradient through the step is 0, so its gripper output never learns where to open
    batch = (s, torch.zeros(256, 4), torch.zeros(256), s, torch.zeros(256))
    sure = (k.abs() > 0.2).numpy()
    agree = {}
    for name, ag in (("binary", agent), ("plain", plain)):
        for _ in range(300):
            ag.update(batch, actor_step=True)
        opens = ag.act(s.numpy(), deterministic=True)[:, 3] > 0.1
        agree[name] = np.mean(opens[sure] == (k.numpy()[sure] > 0))
    assert agree["binary"] > 0.95
    assert agree["plain"] < 0.8


class _FinishCritic(_GripCritic):
    """Q(s, a) = k(s) only for the finishing move, the gripper open (a_grip > 0.1) *and* the hand going up
    (a_dz > 0.5, column 2), else 0: a release pays only once the hand has risen."""

    def forward(self, x):
        q = x[:, 0] * ((x[:, -1] > 0.1) & (x[:, -2] > 0.5)).float() + 0.0 * self.w
        return torch.stack([q, q])


def test_with_rise_the_binary_open_choice_is_valued_as_the_finishing_move():
    binary = _agent_cfg(net=(32, 32), gripper_binary=True, lr=3e-3)
    agent = rl.Agent(_NAMES, 4, binary, seed=0, grip=3, rise=2)
    no_rise = rl.Agent(_NAMES, 4, binary, seed=0, grip=3)
    assert no_rise.rise is None
    s, f, k, a2 = _on_fixed_critic((agent, no_rise), _FinishCritic, seed=4)
    # only the finishing move reaches the value of opening; opening at the actor's own dz is worth nothing
    torch.testing.assert_close(agent.next_value(f, a2), k.clamp(min=0.0))
    torch.testing.assert_close(no_rise.next_value(f, a2), torch.zeros(256))
    batch = (s, torch.zeros(256, 4), torch.zeros(256), s, torch.zeros(256))
    for _ in range(300):
        agent.update(batch, actor_step=True)
    acts = agent.act(s.numpy(), deterministic=True)
    sure = (k.abs() > 0.2).numpy()
    pays = k.numpy()[sure] > 0
    assert np.mean((acts[:, 3] > 0.1)[sure] == pays) > 0.95  # the gripper opens where the finishing move pays


def test_a_binary_gripper_is_a_td3_option():
    with pytest.raises(ValueError, match="gripper_binary: is a td3 option"):
        rl.build("push-target", {"agent.gripper_binary": True, "agent.algo": "sac"})


def test_a_run_whose_training_seeds_cover_the_eval_seeds_is_refused(tmp_path):
    # seed 6 trains from simulator seed 7000000 on, the default eval seeds are 7000000..7000049
    cfg, seeds, out = runner.resolve(cli.parse(["--task", "push-target", "--reward", "sparse", "--seeds", "0,6",
                                                "--steps", "300000", "--out", str(tmp_path / "o")]))
    with pytest.raises(runner.LearnError, match="7000000..7000049"):
        runner.preflight(cfg, seeds, out)
    assert not (tmp_path / "o").exists()
    assert not rl.eval_seed_clash(6, dataclasses.replace(cfg, eval_seed=9_000_000))
    for seed in (0, 5, 7):
        assert not rl.eval_seed_clash(seed, cfg)
    # the bound is the run's length: seed 5 starts 6000000 and would reach 7000000 after a million steps
    assert rl.eval_seed_clash(5, dataclasses.replace(cfg, steps=1_000_000))


class _NoDraw:
    """A generator whose draws never fall under a flip probability."""

    def random(self, n):
        return np.ones(n)


def test_merged_runs_of_different_gripper_set_ups_are_labelled_apart():
    def run(reward="model", **kw):
        return {"reward": reward, "config": rl.build("pick-place", {
            "reward": reward, "agent.gripper_binary": False, "gripper_flip": 0.0, "gripper_flip_hold": 1,
            "gripper_flip_rise": False, "reward_form.potential_scale": 1.0,
            "reward_form.success_progress_one": False, **kw}).to_dict()}

    runs = [run(), run(gripper_flip=0.05), run(**{"agent.gripper_binary": True}),
            run(**{"reward_form.success_progress_one": True})]
    run_label(runs)
    assert runs[0]["label"] == "model, c=10, 0 demos"
    assert runs[1]["label"] == "model, c=10, 0 demos, flip 0.05"
    assert runs[2]["label"] == "model, c=10, 0 demos, binary gripper"
    assert runs[3]["label"] == "model, c=10, 0 demos, success phi 1"
    # runs of one set-up with different reward models: named by the manifest's folder (the oracle run keeps its name)
    runs = [run(), run(model="data/r5/m.toml"), run("oracle")]
    run_label(runs)
    assert [r.get("label") for r in runs] == ["model, c=10, 0 demos, shipped model", "model, c=10, 0 demos, data/r5",
                                              "oracle, c=10, 0 demos"]
    # runs of the bench script before the package (their flat argument dicts) label the same way
    old = [{"reward": "model", "args": {"demos": 0, "shaping_scale": 10.0, "gripper_flip": 0.02,
                                        "gripper_flip_hold": 8, "gripper_flip_rise": True, "gripper_binary": True,
                                        "potential_scale": 0.1, "success_progress_one": True}}, run()]
    run_label(old)
    assert old[0]["label"] == "model, c=10 (potential part x0.1), 0 demos, flip 0.02 x8 rise, binary gripper, success phi 1"


def _served(serve, *flags, gamma):
    from stagewise import StagewiseEnv

    p = serve("--task", "push-target", "--reward", "oracle", "--gamma", str(gamma), "--max-steps", "40", *flags)
    return StagewiseEnv(connect=p.endpoint, connect_timeout=30, gamma=gamma)


@pytest.mark.parametrize("form", ["progress", "potential", "value"])
def test_the_served_reward_is_the_formula_the_shipped_results_learned_from(serve, form):
    """The learner no longer re-shapes the reward: the forms of the shipped results are served by the runtime with
    the flags the learner passes (rl.shaping_args). Checked against the bench script's formulas, step by step, from
    the served phi and task reward: progress r_task + S c (gamma phi' - phi) + c (1 - gamma) phi' (terminated:
    r_task - S c phi + c phi*); potential with offset X r_task + c (gamma (phi' - X) - (phi - X)) (terminated:
    r_task - c (phi - X))."""
    c, s, x, g, k = 10.0, 0.3, 1.0, 0.97, 40.0
    extra = {"progress": {"reward_form.potential_scale": s}, "potential": {"reward_form.phi_offset": x},
             "value": {"reward_form.value_horizon": k}}[form]
    cfg = rl.build("push-target", {"reward": "oracle", "reward_form.gamma": g, "reward_form.shaping": form, **extra})
    env = _served(serve, "--shaping-scale", str(c), *rl.shaping_args(cfg), gamma=g)
    _, info = env.reset(seed=5)
    phi, rng, moved = info["phi"], np.random.default_rng(0), 0
    for _ in range(120):
        _, r, term, trunc, info = env.step(rng.uniform(-1, 1, 4).astype(np.float32))
        phi2, task = info["phi"], info["task_reward"]
        if form == "progress":
            want = (task - s * c * phi + c * phi2) if term else task + s * c * (g * phi2 - phi) + c * (1 - g) * phi2
        elif form == "value":  # the potential g^(K (1 - phi)), terminal potential 0
            pot = lambda p: g ** (k * (1 - p))  # noqa: E731
            want = task + c * ((0.0 if term else g * pot(phi2)) - pot(phi))
        else:
            want = (task - c * (phi - x)) if term else task + c * (g * (phi2 - x) - (phi - x))
        assert r == pytest.approx(want, abs=1e-4), (phi, phi2, task, term)
        moved += abs(phi2 - phi) > 1e-4
        if term or trunc:
            _, info = env.reset()
            phi2 = info["phi"]
        phi = phi2
    assert moved > 10  # the random arm moved the oracle's progress: the potential terms were checked, not only 0
    env.close()


def test_the_value_potential_and_the_oracle_trap_reach_the_server_and_are_checked():
    """`--shaping value --value-horizon K` becomes serve's `--shaping value:K` and is checked against the served
    `value:K`; the oracle trap (the semantic-trap experiment) goes to the training server only, with the oracle."""
    from stagewise.rl.envs import reward_mismatch

    val = rl.build("push-target", {"reward": "model", "reward_form.shaping": "value",
                                   "reward_form.value_horizon": 100.0, "reward_form.shaping_scale": 1.0})
    assert rl.shaping_args(val) == ["--shaping", "value:100.0"]
    served = {"source": "model", "gamma": 0.99, "shaping_scale": 1.0, "shaping": "value:100"}
    assert reward_mismatch(val, served) == []
    assert reward_mismatch(val, {**served, "shaping": "value:50"}) == ["value_horizon: serves 50.0, asked 100.0"]
    assert reward_mismatch(val, {**served, "shaping": "value:x"}) != []
    for bad in ({"reward_form.shaping": "value"}, {"reward_form.value_horizon": 50.0}):
        with pytest.raises(ValueError, match="value_horizon"):
            rl.build("push-target", bad)
    trap = rl.build("push-target", {"reward": "oracle", "oracle_trap": "0.25:0.9"})
    assert rl.serve_args(trap, "oracle", "r", 4, 200)[-1:] == ["--oracle-trap=0.25:0.9"]
    assert "--oracle-trap" not in rl.serve_args(trap, "sparse", "r-eval", 10, 0)
    with pytest.raises(ValueError, match="oracle_trap"):
        rl.build("push-target", {"reward": "model", "oracle_trap": "0.25:0.9"})
    with pytest.raises(ValueError, match="oracle_trap"):
        rl.build("push-target", {"reward": "oracle", "oracle_trap": "0.25:1.5"})


def test_with_model_ends_the_learner_counts_the_models_false_successes(tmp_path, binary):
    """`--episode-ends model` (what a robot has): the training server ends episodes on success detection, the
    learner's train success is the detection's, and curves.json judges it by the simulator. An oracle that always
    reads progress 1 (a trap below the table) detects success two steps into every episode, demonstrations
    included, and the simulator never agrees: every detection is a false success."""
    args = ["--smoke", "--task", "push-target", "--reward", "oracle", "--episode-ends", "model", "--oracle-trap=-1:1",
            "--success-delta", "0.01", "--success-steps", "2", "--demos", "2", "--steps", "800"]  # fmt: skip
    cfg = rl.build("push-target", {"reward": "oracle", "episode_ends": "model", "success_delta": 0.01,
                                   "success_steps": 2})
    train = rl.serve_args(cfg, "oracle", "r", 4, 100)
    assert train[train.index("--episode-ends"):] == ["--episode-ends", "model", "--success-delta", "0.01",
                                                     "--success-steps", "2"]
    assert "--episode-ends" not in rl.serve_args(cfg, "sparse", "r-eval", 10, 0)
    (run,) = runner.learn(cli.parse([*args, "--out", str(tmp_path / "run")]))
    assert run["demos"]["detected"] == 2 and run["demos"]["transitions"] == 4, run["demos"]
    d = run["detection"]
    assert run["train_episodes"] >= 100 and d["detected"] == run["train_episodes"], (run["train_episodes"], d)
    assert d["false_success"] == 1.0 and d["train_sim_success"] == 0.0
    last = run["checkpoints"][-1]
    assert last["train_success"] == 1.0 and last["false_success"] == 1.0
    with pytest.raises(ValueError, match="episode_ends"):
        rl.build("push-target", {"reward": "sparse", "episode_ends": "model"})


def test_with_embeddings_the_policy_reads_the_reward_models_view_and_the_hand_only(tmp_path, binary):
    """`--obs embeddings` (what a robot has): both servers serve the reward model's embeddings, the policy's input
    is those of the 3 views (3 x 64) and the hand's position and gripper width, nothing of the block or target;
    the symmetry augmentation (it pivots on the block's pose) is off and refused on."""
    cfg = rl.build("push-target", {"reward": "model", "obs": "embeddings"})
    assert cfg.augment_symmetry == 0.0
    train, evals = rl.serve_args(cfg, "model", "r", 4, 100), rl.serve_args(cfg, "sparse", "r-eval", 10, 0)
    assert "--embeddings" in train and "--embeddings" in evals
    assert evals[evals.index("--reward") + 1] == "model" and "--episode-ends" not in evals
    with pytest.raises(ValueError, match="augment_symmetry"):
        rl.build("push-target", {"reward": "model", "obs": "embeddings", "augment_symmetry": 1.0})
    with pytest.raises(ValueError, match="obs"):
        rl.build("push-target", {"reward": "oracle", "obs": "embeddings"})
    out = tmp_path / "run"
    (run,) = runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "model", "--obs", "embeddings",
                                     "--demos", "2", "--steps", "800", "--out", str(out)]))  # fmt: skip
    assert run["demos"]["episodes"] == 2 and run["checkpoints"][-1]["steps"] >= 800
    # The exported policy reads the reward model's embeddings (its encoder pinned by sha256), then the hand.
    policy = out / "seed-0" / "policy" / "push-target-model-0.toml"
    manifest = tomllib.loads(policy.read_text())
    assert manifest["state_names"] == ["ee_x", "ee_y", "ee_z", "gripper_width"] and manifest["state_size"] == 4
    shipped = tomllib.loads((ROOT / "models/push-target/push-target-progress.toml").read_text())
    assert manifest["embeddings"] == {"encoder_sha256": shipped["parts"]["encoder_sha256"], "views": 3, "size": 64}
    # The runtime feeds it the run's reward model's embeddings and the hand's fields, and refuses it without them.
    run = subprocess.run([binary, "--log", "warn", "run", "--task", "push-target", "--policy", str(policy),
                          "--envs", "2", "--episodes", "2", "--max-steps", "40", "--no-stream", "--width", "32",
                          "--height", "32", "--log-file", str(tmp_path / "run.swlog")],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0 and "2 episodes" in run.stdout, run.stdout + run.stderr
    for bad, why in ((["--reward", "oracle"], "has no reward model"),
                     (["--model", str(ROOT / "models/pick-place/pick-place-progress.toml")], "was trained on")):
        r = subprocess.run([binary, "run", "--task", "push-target", "--policy", str(policy), "--episodes", "1",
                            "--no-stream", "--width", "32", "--height", "32", *bad,
                            "--log-file", str(tmp_path / "bad.swlog")], capture_output=True, text=True, timeout=300)
        assert r.returncode != 0 and why in r.stderr, r.stderr
    # eval policy renders frames for it and runs the reward model (the task's shipped one), or refuses another.
    report = tmp_path / "eval.json"
    r = subprocess.run([binary, "--log", "warn", "eval", "policy", "--task", "push-target", "--policy", str(policy),
                        "--episodes", "2", "--json", str(report)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0 and json.loads(report.read_text())["episodes"] == 2, r.stdout + r.stderr
    r = subprocess.run([binary, "eval", "policy", "--task", "push-target", "--policy", str(policy), "--episodes", "1",
                        "--model", str(ROOT / "models/pick-place/pick-place-progress.toml")],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode != 0 and "was trained on" in r.stderr, r.stderr
