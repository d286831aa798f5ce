"""The learning benchmark's path, seeded and CI-sized: benches/learner_shaping.py --smoke starts `stagewise serve`
(training: the shipped push-target reward model; evaluation: a second, sparse server), trains its SAC for 3000
env steps, evaluates on held-out seeds, and writes its curve files and ONNX policies. The learning targets
themselves are benchmark figures (benches/learner_shaping.md), not tests."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("learner_shaping", REPO / "benches" / "learner_shaping.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_nstep_returns_and_bootstrap_factors():
    ls = _script()
    buf = ls.Replay(16, 1, 1)
    g = 0.9
    ns = ls.NStep(3, g)
    rewards = [1.0, 2.0, 3.0, 4.0]
    for t, r in enumerate(rewards):
        last = t == len(rewards) - 1
        ns.push(np.array([t]), np.array([0.0]), r, np.array([t + 1]), terminated=last, done=last, out=buf)
    assert buf.n == 4
    # s0: r0 + g r1 + g^2 r2, bootstrapped from s3 with g^3; s1 the same from s4 (the terminal step: factor 0).
    np.testing.assert_allclose(buf.r[:4].numpy(), [1 + g * 2 + g * g * 3, 2 + g * 3 + g * g * 4, 3 + g * 4, 4],
                               rtol=1e-6)
    np.testing.assert_allclose(buf.disc[:4].numpy(), [g ** 3, 0, 0, 0], rtol=1e-6)
    np.testing.assert_array_equal(buf.s2[:4, 0].numpy(), [3, 4, 4, 4])


def test_offset_potential_keeps_the_discounted_return_up_to_a_constant():
    """With Phi = phi - 1 the discounted shaped return of an episode that terminates differs from the one with
    Phi = phi by the same constant c for every trajectory (the offset is still potential-based)."""
    ls = _script()
    a = ls.parse(["--gamma", "0.95", "--shaping-scale", "7", "--phi-offset", "1"])
    rng = np.random.default_rng(0)
    diffs = []
    for _ in range(5):
        phis = np.concatenate([[rng.uniform()], rng.uniform(size=int(rng.integers(2, 30)))])
        served, offset, disc = 0.0, 0.0, 1.0
        for t in range(len(phis) - 1):
            term = t == len(phis) - 2
            nxt = 0.0 if term else phis[t + 1]
            r = (1.0 if term else 0.0) + a.shaping_scale * (a.gamma * nxt - phis[t])
            served += disc * r
            offset += disc * ls.offset_reward(r, term, a, "model")
            disc *= a.gamma
        diffs.append(offset - served)
    np.testing.assert_allclose(diffs, a.shaping_scale, rtol=1e-9)


def test_success_progress_one_pays_the_finishing_step_as_progress_one():
    """--success-progress-one: in the progress form a step that ends in success reads phi' = 1 whatever the model
    read on its frame; a terminal step without success, a non-terminal one, and the sparse reward are unchanged."""
    ls = _script()
    base = ["--reward-form", "progress", "--shaping-scale", "10", "--gamma", "0.99"]

    def finishing(flag, reward="model", success=True, terminated=True, phi_next=0.3):
        a = ls.parse(base + (["--success-progress-one"] if flag else []))
        lr = ls.LearnReward(a, reward)
        lr.reset({"phi": 0.9})
        task = 1.0 if success else 0.0
        served = task + 10 * (0.99 * (0.0 if terminated else phi_next) - 0.9)
        info = {"phi": phi_next, "task_reward": task, "success": success}
        return lr(served, terminated, info)

    assert finishing(False) == pytest.approx(1 + 10 * (0.3 - 0.9))  # the model's low reading bills the release
    assert finishing(True) == pytest.approx(1 + 10 * (1.0 - 0.9))
    assert finishing(True, success=False) == pytest.approx(10 * (0.3 - 0.9))
    mid_episode = dict(success=False, terminated=False)
    assert finishing(True, **mid_episode) == pytest.approx(finishing(False, **mid_episode))
    assert finishing(True, reward="sparse") == finishing(False, reward="sparse")
    with pytest.raises(SystemExit):  # the potential forms end at potential 0: the option would do nothing there
        ls.parse(["--success-progress-one"])


def test_potential_scale_moves_the_return_by_a_start_constant_only():
    """--potential-scale S scales the progress form's potential part: the discounted return of any episode that
    terminates differs from the plain form's (S = 1) by (1 - S) c phi_0, the same for every trajectory from a start
    (so the optimal policy is unchanged), and each step's model term is S c (gamma phi' - phi) + the level."""
    ls = _script()
    base = ["--reward-form", "progress", "--shaping-scale", "10", "--gamma", "0.97"]
    rng = np.random.default_rng(3)
    for scale in (1.0, 0.3, 0.0):
        a = ls.parse(base + ["--potential-scale", str(scale)])
        a1 = ls.parse(base)
        diffs = []
        for _ in range(5):
            phis = np.concatenate([[0.2], rng.uniform(size=int(rng.integers(2, 30)))])
            lr, lr1 = ls.LearnReward(a, "model"), ls.LearnReward(a1, "model")
            lr.reset({"phi": phis[0]})
            lr1.reset({"phi": phis[0]})
            ret, ret1, disc = 0.0, 0.0, 1.0
            for t in range(len(phis) - 1):
                term = t == len(phis) - 2
                task = 1.0 if term else 0.0
                served = task + 10 * (0.97 * (0.0 if term else phis[t + 1]) - phis[t])
                info = {"phi": phis[t + 1], "task_reward": task, "success": term}
                out = lr(served, term, info)
                out1 = lr1(served, term, info)
                level = 10 * phis[t + 1] * (1.0 if term else 0.03)
                assert out == pytest.approx(task + scale * (served - task) + level)
                ret, ret1, disc = ret + disc * out, ret1 + disc * out1, disc * 0.97
            diffs.append(ret - ret1)
        np.testing.assert_allclose(diffs, (1 - scale) * 10 * 0.2, atol=1e-9)
    with pytest.raises(SystemExit):  # the potential forms have no separate potential part to scale
        ls.parse(["--potential-scale", "0.5"])


def test_exported_policy_is_the_deterministic_actor(tmp_path):
    import onnxruntime as ort

    ls = _script()
    names = ["ee_x", "ee_y", "ee_z", "gripper_width", "grasped"] + [f"block0_{f}" for f in
                                                                      ["x", "y", "z", "qw", "qx", "qy", "qz"]]
    names += ["target_x", "target_y"]
    agent = ls.SAC(names, 4, ls.parse(["--net", "32,16"]), seed=1)
    paths = ls.export_onnx(agent, str(tmp_path / "p.onnx"), len(names), "test")
    assert Path(paths["manifest"]).read_text().count('state = "state"') == 1
    x = np.random.default_rng(2).normal(scale=0.2, size=(9, len(names))).astype(np.float32)
    sess = ort.InferenceSession(paths["onnx"])
    (y,) = sess.run(["action"], {"state": x})
    np.testing.assert_allclose(y, agent.act(x, deterministic=True), atol=1e-5)
    assert "stagewise.action_repeat" not in sess.get_modelmeta().custom_metadata_map
    # trained with each action held 4 steps: the graph says so, and the runtime holds them as long
    held = ls.export_onnx(agent, str(tmp_path / "p4.onnx"), len(names), "test", action_repeat=4)
    meta = ort.InferenceSession(held["onnx"]).get_modelmeta().custom_metadata_map
    assert meta["stagewise.action_repeat"] == "4"


def test_smoke_run_trains_evaluates_and_writes_curves(tmp_path, binary):
    import onnxruntime as ort

    ls = _script()
    out = tmp_path / "run"
    runs = ls.main(["--smoke", "--task", "push-target", "--rewards", "model", "--seeds", "3", "--eval-repeat", "2",
                    "--out", str(out)])
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
    assert run["train_episodes"] >= 3000 // 100 - 4  # 100-step episodes, 4 envs (their last ones unfinished)
    assert math.isfinite(run["checkpoints"][-1]["q"])
    saved = json.loads((out / "curves.json").read_text())
    assert [(c["steps"], c["success"]) for c in saved["runs"][0]["checkpoints"]] == \
        [(c["steps"], c["success"]) for c in run["checkpoints"]]
    assert (out / "curves.png").stat().st_size > 10_000
    # The exported policy: state in, action out, the deterministic action in [-1, 1].
    manifest = (out / "policies" / "push-target-model-3-last.toml").read_text()
    assert 'kind = "policy"' in manifest and "state_size = 14" in manifest
    sess = ort.InferenceSession(str(out / "policies" / "push-target-model-3-last.onnx"))
    x = np.random.default_rng(0).normal(size=(7, 14)).astype(np.float32)
    (y,) = sess.run(["action"], {"state": x})
    assert y.shape == (7, 4) and np.all(np.abs(y) <= 1.0)


def test_symmetry_maps_keep_distances_yaw_and_the_action_box():
    """--augment-symmetry: each of the eight maps keeps every distance between ee, block and target, turns a block's
    yaw by the map's angle (or mirrors it), keeps a free-moving gripper's displacement equal to its mapped action's,
    and takes the action box onto itself; P = 0 changes nothing."""

    ls = _script()
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
    sym = ls.Symmetry(names, 1.0)
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
    same = ls.Symmetry(names, 0.0)((s, a, r, s2, disc), torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(same, (s, a, r, s2, disc)))


def test_gripper_flip_sets_the_other_extreme_in_a_share_of_rows_and_nothing_else():
    ls = _script()
    rng = np.random.default_rng(1)
    acts = rng.uniform(-1, 1, (20000, 4)).astype(np.float32)
    before = acts.copy()
    ls.GripperFlip(len(acts), 3, 0.05)(acts, np.random.default_rng(2))
    changed = acts[:, 3] != before[:, 3]
    assert 0.04 < changed.mean() < 0.06
    assert np.array_equal(acts[:, :3], before[:, :3])
    assert np.all(acts[changed, 3] == np.where(before[changed, 3] > 0, -1.0, 1.0))
    # a shut gripper (the saturated actor's -0.93) is flipped wide open: past the release threshold
    shut = np.full((1000, 4), -0.93, np.float32)
    ls.GripperFlip(len(shut), 3, 1.0)(shut, rng)
    assert np.all(shut[:, 3] == 1.0)


def test_a_held_gripper_flip_lasts_its_decisions_then_the_actor_has_the_gripper_again():
    ls = _script()
    flip = ls.GripperFlip(1, 3, 1.0, hold=3)
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
    flip = ls.GripperFlip(1, 3, 1.0, hold=3)
    flip(np.array([[0, 0, 0, -0.9]], np.float32), draws)
    flip.end_episode(0)
    acts = np.array([[0, 0, 0, -0.9]], np.float32)
    flip(acts, _NoDraw())
    assert float(acts[0, 3]) == float(np.float32(-0.9))
    # --gripper-flip-rise: an opening flip also lifts the hand (column 2, dz) while it holds; a shutting one does not
    flip = ls.GripperFlip(2, 3, 1.0, hold=2, rise=2)
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
    ls = _script()
    args = ls.parse(["--net", "32,32", "--gripper-binary", "--lr", "3e-3"])
    agent = ls.SAC(_NAMES, 4, args, seed=0, grip=3)
    plain = ls.SAC(_NAMES, 4, ls.parse(["--net", "32,32"]), seed=0, grip=3)
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
    ls = _script()
    args = ls.parse(["--net", "32,32", "--gripper-binary", "--gripper-flip-rise", "--lr", "3e-3"])
    agent = ls.SAC(_NAMES, 4, args, seed=0, grip=3, rise=2)
    no_rise = ls.SAC(_NAMES, 4, ls.parse(["--net", "32,32", "--gripper-binary", "--lr", "3e-3"]), seed=0, grip=3)
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
    ls = _script()
    with pytest.raises(SystemExit):
        ls.parse(["--gripper-binary", "--algo", "sac"])


def test_a_run_whose_training_seeds_cover_the_eval_seeds_is_refused(capsys):
    ls = _script()
    # seed 6 trains from simulator seed 7000000 on, the default eval seeds are 7000000..7000049
    with pytest.raises(SystemExit):
        ls.parse(["--seeds", "0,6", "--steps", "300000"])
    assert "7000000..7000049" in capsys.readouterr().err
    assert not ls.eval_seed_clash(6, ls.parse(["--seeds", "0", "--eval-seed", "9000000"]))
    for seed in (0, 5, 7):
        assert not ls.eval_seed_clash(seed, ls.parse(["--seeds", str(seed), "--steps", "300000"]))
    # the bound is the run's length: seed 5 starts 6000000 and would reach 7000000 after a million steps
    with pytest.raises(SystemExit):
        ls.parse(["--seeds", "5", "--steps", "1000000"])


class _NoDraw:
    """A generator whose draws never fall under a flip probability."""

    def random(self, n):
        return np.ones(n)


def test_merged_runs_of_different_gripper_set_ups_are_labelled_apart():
    ls = _script()
    base = ["benches/learner_shaping.py", "--task", "pick-place", "--rewards", "model", "--shaping-scale", "10"]
    runs = [{"reward": "model", "argv": base}, {"reward": "model", "argv": base + ["--gripper-flip", "0.05"]},
            {"reward": "model", "argv": base + ["--gripper-binary"]},
            {"reward": "model", "argv": base + ["--reward-form", "progress", "--success-progress-one"]}]
    ls.run_label(runs)
    assert runs[0]["label"] == "model, c=10, 0 demos"
    assert runs[1]["label"] == "model, c=10, 0 demos, flip 0.05"
    assert runs[2]["label"] == "model, c=10, 0 demos, binary gripper"
    assert runs[3]["label"] == "model, c=10, 0 demos, success phi 1"
    # runs of one set-up with different reward models: named by the manifest's folder (the oracle run keeps its name)
    runs = [{"reward": "model", "argv": base}, {"reward": "model", "argv": base + ["--model", "data/r5/m.toml"]},
            {"reward": "oracle", "argv": base[:-4] + ["--rewards", "oracle", "--shaping-scale", "10"]}]
    ls.run_label(runs)
    assert [r.get("label") for r in runs] == ["model, c=10, 0 demos, shipped model", "model, c=10, 0 demos, data/r5",
                                              "oracle, c=10, 0 demos"]
