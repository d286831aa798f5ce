"""Look-ahead advice (`stagewise learn --shaping advice`, Wiewiora et al. 2003): the learner trains on the task
reward alone and reads every Q as its critics' plus c psi(s, a), psi regressing the reward model's phi after each
decision. Checked here: psi's action gradient reaches the actor; the critics' fixed point is the unshaped Q however
psi points (the invariance); the set-up's flags; and a CI-sized run against a real `stagewise serve` whose replay
holds the task reward and the served phi."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from stagewise import rl
from stagewise.rl import AgentConfig, checkpoint, cli, runner
from stagewise.rl.envs import reward_mismatch

_NAMES = ["ee_x", "ee_y", "ee_z", "gripper_width"]
_CFG = dataclasses.replace(AgentConfig(), net=(32, 32), lr=3e-3)


class _ZeroCritic(torch.nn.Module):
    """Two critics that read 0 everywhere and cannot learn (a zero-weight parameter for the optimiser; the input
    times 0, so that the actor's loss has a graph, with gradient 0)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        q = (0.0 * x).sum(-1) + 0.0 * self.w
        return torch.stack([q, q])


def _batch(seed: int, reward_of):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(256, len(_NAMES), generator=g)
    a = torch.rand(256, 4, generator=g) * 2 - 1
    # the model's phi after the decision grows with the action's dx: what psi is to learn
    return s, a, reward_of(a), s, torch.zeros(256), (a[:, 0] + 1) / 2


def test_psi_learns_phi_and_its_action_gradient_reaches_the_actor():
    adv = rl.Agent(_NAMES, 4, _CFG, seed=0, advice=1.0)
    plain = rl.Agent(_NAMES, 4, _CFG, seed=0)
    for ag in (adv, plain):
        ag.q, ag.q_targ = _ZeroCritic(), _ZeroCritic()
        ag.q_params, ag.q_targ_params = list(ag.q.parameters()), list(ag.q_targ.parameters())
    batch = _batch(0, lambda a: torch.zeros(256))
    before = plain.act(batch[0].numpy(), deterministic=True)[:, 0]
    for _ in range(400):
        for ag in (adv, plain):
            ag.update(batch, actor_step=True)
    x = torch.cat([adv.features(batch[0]), batch[1]], -1)
    assert float((adv.psi(x)[0] - batch[5]).abs().mean().detach()) < 0.05  # psi reads phi after the decision
    # the critics read 0: the advice agent's actor climbs psi (dx -> +1); the plain one has no gradient at all
    assert np.mean(adv.act(batch[0].numpy(), deterministic=True)[:, 0] > 0.8) > 0.95
    np.testing.assert_allclose(plain.act(batch[0].numpy(), deterministic=True)[:, 0], before, atol=1e-6)


def test_the_fixed_point_is_the_unshaped_q_however_psi_points():
    """The task pays for dx -> -1 while phi grows with dx: the critics learn the residual, and their sum with c psi
    (what the actor climbs) is the task's Q, which prefers dx = -1 (advice only shapes the way there). At c = 3 a
    critic that learned r alone, read plus c psi, would prefer dx = +1."""
    agent = rl.Agent(_NAMES, 4, _CFG, seed=1, advice=3.0)
    batch = _batch(1, lambda a: -a[:, 0])
    for _ in range(1500):
        agent.update(batch, actor_step=(agent.updates % 2 == 0))
    f = agent.features(batch[0])
    with torch.no_grad():
        q = agent.q_value(torch.cat([f, batch[1]], -1)).mean(0)
        ends = []
        for dx in (-1.0, 1.0):
            a = batch[1].clone()
            a[:, 0] = dx
            ends.append(agent.q_value(torch.cat([f, a], -1)).mean(0))
    assert float((q - batch[2]).abs().mean()) < 0.1
    assert float((ends[0] > ends[1]).float().mean()) > 0.95


def test_advice_is_asked_of_the_server_as_its_default_form_and_needs_phi():
    cfg = rl.build("pick-place", {"reward": "model", "reward_form.shaping": "advice"})
    assert (cfg.reward_form.shaping_scale, cfg.reward_form.potential_scale) == (1.0, 1.0)
    assert not cfg.reward_form.success_progress_one  # pick-place's progress options stay with the progress form
    assert rl.shaping_args(cfg) == []  # the server shapes with its default potential form; the learner reads r_task
    served = {"source": "model", "gamma": 0.99, "shaping_scale": 1.0, "shaping": "potential", "phi_offset": 0.0}
    assert reward_mismatch(cfg, served) == []
    assert reward_mismatch(cfg, {**served, "shaping": "progress"}) == ["shaping: serves 'progress', asked 'potential'"]
    with pytest.raises(ValueError, match="advice reads the reward model's"):
        rl.build("push-target", {"reward": "sparse", "reward_form.shaping": "advice"})
    with pytest.raises(ValueError, match="advice needs c > 0"):
        rl.build("push-target", {"reward": "model", "reward_form.shaping": "advice", "reward_form.shaping_scale": 0.0})
    # a server that sends no task reward cannot be learnt from with advice
    from stagewise.rl.envs import ServeError, learner_reward

    assert learner_reward(3.5, {"task_reward": 1.0}, advice=True) == 1.0
    assert learner_reward(3.5, {}, advice=False) == 3.5
    with pytest.raises(ServeError, match="no `task_reward`"):
        learner_reward(3.5, {}, advice=True)


def test_a_smoke_run_with_advice_stores_the_task_reward_and_the_served_phi(tmp_path, binary):
    out = tmp_path / "run"
    runs = runner.learn(cli.parse(["--smoke", "--task", "push-target", "--reward", "model", "--shaping", "advice",
                                   "--seeds", "0", "--out", str(out)]))
    assert runs[0]["done"] and runs[0]["updates"] > 0
    state = checkpoint.load(out / "seed-0" / "checkpoint.pt")
    rep = state["replay"]
    # r: n-step sums of the task reward (0 or 1 a step), not the served potential-shaped reward
    assert float(rep["r"].min()) >= 0.0 and float(rep["r"].max()) <= 3.0
    phi = rep["adv"]
    assert 0.0 <= float(phi.min()) and float(phi.max()) <= 1.0 and float(phi.std()) > 0.01
    assert "psi" in state["agent"]
