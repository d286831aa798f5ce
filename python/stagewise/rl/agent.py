"""The learner: a small SAC / TD3 in plain torch (SB3's per-update overhead made it 3-5x slower here), its replay,
n-step returns, symmetry augmentation, gripper-flip exploration and the export of its deterministic actor as an ONNX
policy. `stagewise.rl.train` runs it against `stagewise serve`; docs/lab (docs/lab/learner_shaping.md) says which
set-up measured what. Every piece has `state_dict` / `load_state_dict` for the crash-safe checkpoint."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..export import mlp_to_onnx, write_policy
from .config import AgentConfig


# ------------------------------------------------------------------------------------------------ features


def feature_map(names: List[str]):
    """A fixed affine map f = W s + b from the state (by name) to O(1) features: positions / 0.1 m, the gripper
    width to [-1, 1], quaternions and flags as they are, plus (block - gripper) / 0.05 m and (target - block) /
    0.05 m. Linear, so it is part of the exported policy graph."""
    idx = {n: i for i, n in enumerate(names)}
    rows, bias = [], []

    def row(coefs: Dict[str, float], b: float = 0.0):
        r = np.zeros(len(names), np.float32)
        for n, c in coefs.items():
            r[idx[n]] += c
        rows.append(r)
        bias.append(b)

    for n in names:
        if n == "gripper_width":
            row({n: 2.0 / 0.08}, -1.0)
        elif n.endswith(("_x", "_y", "_z")):
            row({n: 10.0})
        else:
            row({n: 1.0})
    blocks = sorted({n.split("_")[0] for n in names if n.startswith("block") and n.endswith("_x")})
    for b in blocks:
        for ax in "xyz":
            if f"{b}_{ax}" in idx:  # a locator gives the block's x, y only
                row({f"{b}_{ax}": 20.0, f"ee_{ax}": -20.0})
    if "target_x" in idx and blocks:
        for ax in "xy":
            row({f"target_{ax}": 20.0, f"{blocks[0]}_{ax}": -20.0})
    return np.stack(rows), np.asarray(bias, np.float32)


# ---------------------------------------------------------------------------------------------- the learner


class EnsembleLinear(nn.Module):
    def __init__(self, e: int, i: int, o: int):
        super().__init__()
        bound = 1.0 / math.sqrt(i)
        self.w = nn.Parameter(torch.empty(e, i, o).uniform_(-bound, bound))
        self.b = nn.Parameter(torch.empty(e, 1, o).uniform_(-bound, bound))

    def forward(self, x):  # [E, B, i] -> [E, B, o]
        return torch.baddbmm(self.b, x, self.w)


class Critics(nn.Module):
    """E Q-networks evaluated as one batched matmul per layer; Linear-LayerNorm-ReLU (RLPD)."""

    def __init__(self, e: int, inp: int, hidden: List[int], layer_norm: bool):
        super().__init__()
        self.e, self.ln = e, layer_norm
        dims = [inp] + hidden
        self.layers = nn.ModuleList(EnsembleLinear(e, a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = EnsembleLinear(e, dims[-1], 1)

    def forward(self, x):  # x [B, inp] -> [E, B]
        h = x.unsqueeze(0).expand(self.e, -1, -1)
        for layer in self.layers:
            h = layer(h)
            if self.ln:
                h = F.layer_norm(h, h.shape[-1:])
            h = F.relu(h)
        return self.out(h).squeeze(-1)


class Actor(nn.Module):
    def __init__(self, inp: int, hidden: List[int], act: int):
        super().__init__()
        dims, layers = [inp] + hidden, []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(dims[-1], 2 * act)
        self.act = act

    def forward(self, f, deterministic=False, with_logp=True):
        mu, log_std = self.head(self.body(f)).split(self.act, -1)
        if deterministic:
            return torch.tanh(mu), None
        log_std = log_std.clamp(-5.0, 2.0)
        eps = torch.randn_like(mu)
        u = mu + log_std.exp() * eps
        a = torch.tanh(u)
        if not with_logp:
            return a, None
        logp = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
        return a, logp


class Agent:
    """SAC or TD3 (`AgentConfig.algo`). `grip`: the action column of the gripper, or None. With `gripper_binary` (td3) the gripper is a binary
    choice, shut (-1) or open (+1), as HIL-SERL gives the gripper its own discrete critic: the critic's target takes
    the better of the two at the next state, and the actor's gripper output is regressed onto the better of the two
    at its own continuous action. A deterministic actor's gradient dQ/d(grip) is ~0 away from the release threshold
    (the width command is a step there), so plain TD3 never learns to let go of a block it holds. `rise` (the column
    of dz, with `gripper_flip_rise`): the open choice is valued as the finishing move the flips explore, open *and*
    the hand up (dz = +1): a release only pays once the hand has risen, so opening at the actor's own dz is not what
    the data shows to succeed. Only the gripper output is regressed onto the choice; the actor's dz keeps its critic
    gradient (regressing dz onto +1 wherever opening looked better lifted an untrained actor away from the block:
    0% progress at 20k)."""

    def __init__(self, state_names, act_dim, cfg: AgentConfig, seed, grip: Optional[int] = None,
                 rise: Optional[int] = None, advice: float = 0.0, pixels=None):
        torch.manual_seed(seed)
        self.cfg = cfg
        self.grip = grip if cfg.gripper_binary else None
        self.rise = rise if self.grip is not None else None
        # `pixels` (pixels.PixelFeatures): the observation's frames go through its encoder, which the critics train
        # (the actor reads its features detached, as in DrQ); else the fixed feature map of the state
        self.pix = pixels
        w, b = feature_map(state_names)
        self.fw, self.fb = torch.as_tensor(w), torch.as_tensor(b)
        nf = pixels.out_size if pixels is not None else w.shape[0]
        hidden = list(cfg.net)
        self.actor = Actor(nf, hidden, act_dim)
        self.q = Critics(cfg.critics, nf + act_dim, hidden, cfg.layer_norm)
        self.q_targ = Critics(cfg.critics, nf + act_dim, hidden, cfg.layer_norm)
        self.q_targ.load_state_dict(self.q.state_dict())
        for p in self.q_targ.parameters():
            p.requires_grad_(False)
        self.q_params, self.q_targ_params = list(self.q.parameters()), list(self.q_targ.parameters())
        self.opt_pi = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr)
        enc = [p for p in pixels.parameters() if p.requires_grad] if pixels is not None else []
        self.opt_q = torch.optim.Adam(list(self.q.parameters()) + enc, lr=cfg.lr)
        # Look-ahead advice (`--shaping advice`, c = `advice` > 0): psi(s, a) regresses the reward model's phi after
        # the decision, and every Q the learner reads is the critic's plus c psi (see `q_value`).
        self.advice = advice
        self.psi = Critics(1, nf + act_dim, hidden, cfg.layer_norm) if advice > 0 else None
        self.opt_psi = torch.optim.Adam(self.psi.parameters(), lr=cfg.lr) if self.psi is not None else None
        self.log_alpha = torch.tensor(math.log(cfg.alpha), requires_grad=True)
        self.opt_alpha = torch.optim.Adam([self.log_alpha], lr=cfg.lr)
        self.target_entropy = -cfg.target_entropy * act_dim
        self.updates = 0
        self.noise = cfg.expl_noise  # td3 exploration noise (scheduled by the run loop)
        self.stats = {"q": float("nan"), "alpha": cfg.alpha, "q_loss": float("nan")}

    def state_dict(self) -> dict:
        """Everything that changes while learning: nets, target critics, optimisers, alpha, counters."""
        d = {"actor": self.actor.state_dict(), "q": self.q.state_dict(), "q_targ": self.q_targ.state_dict(),
             "opt_pi": self.opt_pi.state_dict(), "opt_q": self.opt_q.state_dict(),
             "opt_alpha": self.opt_alpha.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
             "updates": self.updates, "noise": self.noise, "stats": dict(self.stats)}
        if self.psi is not None:
            d.update(psi=self.psi.state_dict(), opt_psi=self.opt_psi.state_dict())
        if self.pix is not None:
            d["pixels"] = self.pix.state_dict()
        return d

    def load_state_dict(self, d: dict) -> None:
        self.actor.load_state_dict(d["actor"])
        self.q.load_state_dict(d["q"])
        self.q_targ.load_state_dict(d["q_targ"])
        if self.pix is not None:
            self.pix.load_state_dict(d["pixels"])
        self.opt_pi.load_state_dict(d["opt_pi"])
        self.opt_q.load_state_dict(d["opt_q"])
        self.opt_alpha.load_state_dict(d["opt_alpha"])
        if self.psi is not None:
            self.psi.load_state_dict(d["psi"])
            self.opt_psi.load_state_dict(d["opt_psi"])
        with torch.no_grad():
            self.log_alpha.copy_(d["log_alpha"])
        self.updates, self.noise, self.stats = d["updates"], d["noise"], dict(d["stats"])

    def features(self, s, augment: bool = False, raw: bool = False):
        """The actor's and critics' input of observations `s` (`raw`: as the env gives them, even when the replay
        holds the pixel encoder's cached conv features)."""
        if self.pix is not None:
            return self.pix(s, augment, cached=self.pix.cached and not raw)
        return s @ self.fw.T + self.fb

    @torch.no_grad()
    def act(self, states: np.ndarray, deterministic: bool) -> np.ndarray:
        f = self.features(torch.as_tensor(states, dtype=torch.float32), raw=True)
        if self.cfg.algo == "td3":
            mu = self.actor(f, deterministic=True)[0]
            if not deterministic:
                mu = (mu + self.noise * torch.randn_like(mu)).clamp(-1.0, 1.0)
            return mu.numpy()
        return self.actor(f, deterministic=deterministic, with_logp=False)[0].numpy()

    def q_value(self, x, critics: Optional[nn.Module] = None):
        """The ensemble's Q of `x` = [features, action] ([E, B]): the critics' (default `self.q`), plus c psi(s, a)
        with look-ahead advice (Wiewiora et al. 2003). The critics then learn the residual Q - c psi; since the TD
        target is read through the same sum, its fixed point is the unshaped Q whatever psi is (the invariance),
        while psi's action gradient reaches the actor from the first update."""
        q = (critics or self.q)(x)
        return q if self.psi is None else q + self.advice * self.psi(x)

    def update(self, batch, actor_step: bool):
        # disc = gamma^k * (1 - terminated): the bootstrap factor; batch[5] (with advice): the model's phi after
        # the decision, psi's regression target
        s, a, r, s2, disc = batch[:5]
        f = self.features(s, augment=True)  # with pixels: the critics' loss trains the encoder through f
        with torch.no_grad():
            f2 = self.features(s2, augment=True)
        x = torch.cat([f, a], -1)
        if self.psi is not None:
            psi_loss = (self.psi(torch.cat([f.detach(), a], -1))[0] - batch[5]).pow(2).mean()
            self.opt_psi.zero_grad(set_to_none=True)
            psi_loss.backward()
            self.opt_psi.step()
        td3 = self.cfg.algo == "td3"
        alpha = torch.zeros(()) if td3 else self.log_alpha.exp().detach()
        with torch.no_grad():
            if td3:  # target policy smoothing (Fujimoto et al. 2018)
                a2 = self.actor(f2, deterministic=True)[0]
                a2 = (a2 + (0.2 * torch.randn_like(a2)).clamp(-0.5, 0.5)).clamp(-1.0, 1.0)
                logp2 = torch.zeros(a2.shape[0])
            else:
                a2, logp2 = self.actor(f2)
            y = r + disc * (self.next_value(f2, a2) - alpha * logp2)
        q = self.q(x)
        if self.psi is not None:  # the critics learn the residual over c psi (psi is trained on phi alone)
            with torch.no_grad():
                base = self.advice * self.psi(x)
            q = q + base
        q_loss = (q - y.unsqueeze(0)).pow(2).mean(1).sum()
        self.opt_q.zero_grad(set_to_none=True)
        q_loss.backward()
        self.opt_q.step()
        with torch.no_grad():
            torch._foreach_lerp_(self.q_targ_params, self.q_params, self.cfg.tau)
        self.updates += 1
        f = f.detach()  # the actor's loss does not train the encoder (DrQ)
        if actor_step:
            if td3:
                ap, logp = self.actor(f, deterministic=True)[0], torch.zeros(f.shape[0])
            else:
                ap, logp = self.actor(f)
            frozen = self.q_params + (list(self.psi.parameters()) if self.psi is not None else [])
            for p in frozen:
                p.requires_grad_(False)
            qp = self.q_value(torch.cat([f, ap], -1)).mean(0)
            for p in frozen:
                p.requires_grad_(True)
            pi_loss = (alpha * logp - qp).mean()
            if self.grip is not None:  # the gripper output regressed onto the better choice at the actor's action
                with torch.no_grad():
                    q_shut, q_open = (self.q_value(torch.cat([f, self._grip_set(ap, g)], -1)).mean(0)
                                      for g in (-1.0, 1.0))
                    better = torch.where(q_open > q_shut, 1.0, -1.0)
                pi_loss = pi_loss + (ap[:, self.grip] - better).pow(2).mean()
            self.opt_pi.zero_grad(set_to_none=True)
            pi_loss.backward()
            self.opt_pi.step()
            if self.cfg.auto_alpha and not td3:
                alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
                self.opt_alpha.zero_grad(set_to_none=True)
                alpha_loss.backward()
                self.opt_alpha.step()
            self.stats = {"q": float(qp.mean().detach()), "alpha": float(alpha),
                          "q_loss": float(q_loss.detach()) / self.cfg.critics}

    def next_value(self, f2, a2):
        """The target critics' value of (s2, a2): the min over the ensemble (RLPD: over a random pair of it); with a
        binary gripper, that of the better gripper choice at a2's continuous action."""
        pair = torch.randperm(self.cfg.critics)[:2] if self.cfg.critics > 2 else slice(None)
        choices = [a2] if self.grip is None else [self._grip_set(a2, g) for g in (-1.0, 1.0)]
        return torch.stack([self.q_value(torch.cat([f2, c], -1), self.q_targ)[pair].min(0).values
                            for c in choices]).max(0).values

    def _grip_set(self, acts, value: float):
        """`acts` with the gripper column set to `value`, and with `rise` an opening one also moving the hand up (a
        copy, no gradient through those columns)."""
        out = acts.clone()
        out[:, self.grip] = value
        if self.rise is not None and value > 0:
            out[:, self.rise] = 1.0
        return out


class Replay:
    """Preallocated torch tensors; n-step transitions are assembled per env before they are stored. `adv`: the
    reward model's phi after the transition's first decision (what look-ahead advice regresses; 0 without it).
    `pix`: the observation's first `pix` values are camera bytes (0..255, `--obs pixels`), kept as uint8 (a quarter
    of the memory) and returned as float32 like the rest. Full, it overwrites its oldest transitions."""

    def __init__(self, cap, s_dim, a_dim, pix: int = 0):
        self.pix = pix
        self.s_pix = torch.zeros(cap, pix, dtype=torch.uint8)
        self.s2_pix = torch.zeros(cap, pix, dtype=torch.uint8)
        self.s = torch.zeros(cap, s_dim - pix)
        self.a = torch.zeros(cap, a_dim)
        self.r = torch.zeros(cap)
        self.s2 = torch.zeros(cap, s_dim - pix)
        self.disc = torch.zeros(cap)
        self.adv = torch.zeros(cap)
        self.n, self.cap, self.i = 0, cap, 0
        self.added = 0  # transitions ever added (the crash-safety tests count them)
        self.transform = None  # applied to both observations of a transition as it is added

    KEYS = ("s", "a", "r", "s2", "disc", "adv", "s_pix", "s2_pix")

    def state_dict(self) -> dict:
        n = self.n
        return {**{k: getattr(self, k)[:n].clone() for k in self.KEYS}, "n": n, "i": self.i, "added": self.added,
                "cap": self.cap}

    def load_state_dict(self, d: dict) -> None:
        """A checkpoint's buffer, into one of the same or (a run extended with more steps) a larger capacity: its
        transitions kept, new ones filling the new room first."""
        pix = d["s_pix"].shape[1] if "s_pix" in d else 0
        if d["cap"] > self.cap or d["s"].shape[1:] != self.s.shape[1:] or d["a"].shape[1:] != self.a.shape[1:] \
                or pix != self.pix:
            raise ValueError(f"checkpoint replay of capacity {d['cap']} and shapes {tuple(d['s'].shape[1:])}/"
                             f"{tuple(d['a'].shape[1:])} (+{pix} camera bytes) does not fit this run's ({self.cap}, "
                             f"{tuple(self.s.shape[1:])}/{tuple(self.a.shape[1:])} (+{self.pix}))")
        n = d["n"]
        for k in self.KEYS:
            if k in d:  # a checkpoint from before `adv` has none (its run had no advice), nor camera bytes
                getattr(self, k)[:n] = d[k]
        self.n, self.i, self.added = n, (d["i"] if d["cap"] == self.cap else n % self.cap), d["added"]

    def add(self, s, a, r, s2, disc, adv: float = 0.0):
        j, p = self.i, self.pix
        if self.transform is not None:
            s, s2 = self.transform(s), self.transform(s2)
        s, s2 = np.asarray(s, np.float32), np.asarray(s2, np.float32)
        if p:
            self.s_pix[j] = torch.from_numpy(s[:p].astype(np.uint8))
            self.s2_pix[j] = torch.from_numpy(s2[:p].astype(np.uint8))
        self.s[j] = torch.from_numpy(np.array(s[p:], np.float32))
        self.a[j] = torch.from_numpy(np.array(a, np.float32))
        self.r[j] = float(r)
        self.s2[j] = torch.from_numpy(np.array(s2[p:], np.float32))
        self.disc[j] = float(disc)
        self.adv[j] = float(adv)
        self.i = (j + 1) % self.cap
        self.n = min(self.n + 1, self.cap)
        self.added += 1

    def sample(self, b):
        i = torch.randint(0, self.n, (b,))
        s, s2 = self.s[i], self.s2[i]
        if self.pix:
            s, s2 = torch.cat([self.s_pix[i].float(), s], 1), torch.cat([self.s2_pix[i].float(), s2], 1)
        return s, self.a[i], self.r[i], s2, self.disc[i], self.adv[i]


def sample(online: Replay, demo: Optional[Replay], b: int, demo_ratio: float):
    """A batch: `demo_ratio` of it from the demonstrations (RLPD's symmetric sampling at 0.5), the rest online."""
    nd = int(round(b * demo_ratio)) if demo is not None and demo.n else 0
    if online.n == 0:
        nd = b
    if nd == 0:
        return online.sample(b)
    if nd == b:
        return demo.sample(b)
    return tuple(torch.cat(x) for x in zip(online.sample(b - nd), demo.sample(nd)))


class Symmetry:
    """`augment_symmetry` P: a share P of each batch's transitions mapped by a random element of the square's
    symmetry group (turns by 0/90/180/270 degrees about the vertical axis through block 0, each with or without a
    mirror through that axis), applied to the state and the next state alike (every x, y position, the blocks'
    orientation) and to the action's dx, dy. A tabletop push or pick-and-place is the same task in every direction
    (gravity is vertical; the gripper's velocity commands turn with the scene), and these eight maps take the action
    box [-1, 1]^2 onto itself, so a mapped transition is one the env could have produced, with the same reward (the
    task reward and the progress are functions of distances, which the maps keep). Approximate where the table's
    edge, the workspace bound or the fingers' fixed orientation matter. Applied alike to every reward condition."""

    def __init__(self, names: List[str], p: float):
        idx = {n: i for i, n in enumerate(names)}
        self.p = p
        self.pivot = (idx["block0_x"], idx["block0_y"])
        bodies = ["ee", "target"] + sorted({n[:-2] for n in names if n.startswith("block") and n.endswith("_x")})
        self.points = [(idx[f"{b}_x"], idx[f"{b}_y"]) for b in bodies if f"{b}_x" in idx]
        self.quats = [tuple(idx[f"{b}_q{c}"] for c in "wxyz") for b in bodies if f"{b}_qw" in idx]

    def _map_state(self, s, mirror, k, px, py):
        s = s.clone()
        for ix, iy in self.points:
            x, y = s[:, ix] - px, s[:, iy] - py
            x = torch.where(mirror, -x, x)
            c, si = _cos90(k), _sin90(k)
            s[:, ix], s[:, iy] = px + c * x - si * y, py + si * x + c * y
        hc, hs = torch.cos(k * math.pi / 4), torch.sin(k * math.pi / 4)  # half of k * 90 degrees
        for iw, ix, iy, iz in self.quats:
            w, qx, qy, qz = (s[:, i].clone() for i in (iw, ix, iy, iz))
            # the mirror x -> -x takes rotation R to M R M: quaternion (w, x, -y, -z)
            qy, qz = torch.where(mirror, -qy, qy), torch.where(mirror, -qz, qz)
            # then q_z(k 90 deg) * q, q_z = (cos, 0, 0, sin) of the half angle
            s[:, iw], s[:, ix] = hc * w - hs * qz, hc * qx - hs * qy
            s[:, iy], s[:, iz] = hc * qy + hs * qx, hc * qz + hs * w
        return s

    def __call__(self, batch, gen: Optional[torch.Generator] = None):
        """The batch mapped; what follows its five first entries (advice's phi: a distance-only quantity, like the
        reward) is kept as it is."""
        s, a, r, s2, disc = batch[:5]
        n = s.shape[0]
        on = torch.rand(n, generator=gen) < self.p
        k = torch.randint(0, 4, (n,), generator=gen) * on
        mirror = (torch.rand(n, generator=gen) < 0.5) & on
        px, py = s[:, self.pivot[0]].clone(), s[:, self.pivot[1]].clone()
        keep = ~on.unsqueeze(1)  # the identity's rows stay bit-exact
        s = torch.where(keep, s, self._map_state(s, mirror, k, px, py))
        s2 = torch.where(keep, s2, self._map_state(s2, mirror, k, px, py))
        ma = a.clone()
        ax, ay = torch.where(mirror, -a[:, 0], a[:, 0]), a[:, 1]
        c, si = _cos90(k), _sin90(k)
        ma[:, 0], ma[:, 1] = c * ax - si * ay, si * ax + c * ay
        return (s, torch.where(keep, a, ma), r, s2, disc, *batch[5:])


def _cos90(k):
    """cos(k * 90 degrees), exact."""
    return torch.tensor([1.0, 0.0, -1.0, 0.0])[k]


def _sin90(k):
    return torch.tensor([0.0, 1.0, 0.0, -1.0])[k]


class NStep:
    """Per-env window of the last n transitions (s, a, r, g, adv), g the discount over the transition (gamma, or
    gamma^j for an action held j env steps); emits (s_0, a_0, r_0 + g_0 r_1 + g_0 g_1 r_2 + .., s_n, g_0 ..
    g_{n-1}, adv_0) once full, and flushes the rest at an episode end (terminated: bootstrap factor 0; truncated:
    the product of the g's, bootstrapping from the last state)."""

    def __init__(self, n, gamma):
        self.n, self.g = n, gamma
        self.buf: List = []

    def push(self, s, a, r, s2, terminated, done, out: Replay, g: Optional[float] = None, adv: float = 0.0):
        self.buf.append((s, a, r, self.g if g is None else g, adv))
        if len(self.buf) == self.n:
            self._emit(s2, terminated, out)
        if done:
            while self.buf:
                self._emit(s2, terminated, out)

    def flush(self, s_last, out: Replay) -> None:
        """Emits what the window holds as a truncated episode ending at `s_last` (bootstrapped from it): a resumed
        run's envs start fresh episodes, and the transitions the crash interrupted are kept, each once."""
        while self.buf:
            self._emit(s_last, False, out)

    def state_dict(self) -> list:
        return [(np.asarray(s), np.asarray(a), float(r), float(g), float(adv)) for s, a, r, g, adv in self.buf]

    def load_state_dict(self, buf: list) -> None:
        self.buf = [tuple(t) + (0.0,) * (5 - len(t)) for t in buf]  # a checkpoint from before `adv`: 0

    def _emit(self, s_last, terminated, out):
        ret, disc = 0.0, 1.0
        for _, _, r, g, _ in self.buf:
            ret += disc * r
            disc *= g
        s0, a0, _, _, adv = self.buf.pop(0)
        out.add(s0, a0, ret, s_last, 0.0 if terminated else disc, adv)


class GripperFlip:
    """`gripper_flip` p: in each env's exploratory action with probability p, the gripper command (column
    `grip`) is set to its other extreme, shut (-1) if it was opening (> 0), else wide open (+1), and held there for
    `hold` decisions (`gripper_flip_hold`). A TD3 actor that learned to hold the gripper shut commands ~-0.9, and
    its Gaussian noise never crosses the simulator's release threshold (> 0.1), so it never tries letting go; a
    one-decision opening is undone by the actor's next decision, which shuts the gripper on the block again, so
    a release that can end in success (open, then the hand 4 cm up) needs the opening held. `rise` (the column of
    dz, `gripper_flip_rise`): an opening flip also commands the hand up for its decisions, so that the data holds
    the whole finishing move, not an opening the actor's next decisions undo."""

    def __init__(self, envs: int, grip: int, p: float, hold: int = 1, rise: Optional[int] = None):
        self.grip, self.p, self.hold, self.rise = grip, p, max(hold, 1), rise
        self.left = np.zeros(envs, dtype=np.int64)  # decisions each env's flip still holds
        self.value = np.zeros(envs, dtype=np.float32)

    def state_dict(self) -> dict:
        return {"left": self.left.copy(), "value": self.value.copy()}

    def load_state_dict(self, d: dict) -> None:
        self.left, self.value = d["left"].copy(), d["value"].copy()

    def end_episode(self, env: int):
        """A flip does not carry over into the env's next episode."""
        self.left[env] = 0

    def __call__(self, acts: np.ndarray, rng) -> np.ndarray:
        """Flips (and holds flips of) the rows of `acts` in place; returns `acts`."""
        g = self.grip
        start = (self.left == 0) & (rng.random(len(acts)) < self.p)
        self.value[start] = np.where(acts[start, g] > 0.0, -1.0, 1.0)
        self.left[start] = self.hold
        on = self.left > 0
        acts[on, g] = self.value[on]
        if self.rise is not None:  # gripper_flip_rise: an opening flip also lifts the hand (the finishing move)
            acts[on & (self.value > 0), self.rise] = 1.0
        self.left[on] -= 1
        return acts


# ------------------------------------------------------------------------------------------------- export


def actor_onnx(agent: Agent) -> bytes:
    """The deterministic actor (features, MLP, tanh of the mean) as ONNX `state` [N, S] -> `action` [N, A]."""
    if agent.pix is not None:
        from .pixels import pixel_actor_onnx

        return pixel_actor_onnx(agent.pix, agent.actor)
    act = agent.actor.act
    head = nn.Linear(agent.actor.head.in_features, act)
    with torch.no_grad():
        head.weight.copy_(agent.actor.head.weight[:act])
        head.bias.copy_(agent.actor.head.bias[:act])
    return mlp_to_onnx(list(agent.actor.body) + [head], agent.fw.shape[1], act,
                       input_affine=(agent.fw.numpy(), agent.fb.numpy()), output="tanh")


def export_policy(agent: Agent, out_dir, name: str, *, task: str, state_names: List[str], description: str,
                  action_repeat: int = 1, embeddings: Optional[Dict[str, Any]] = None,
                  pixels: Optional[Dict[str, Any]] = None):
    """The deterministic actor as `<out_dir>/<name>.onnx` + its `kind = "policy"` manifest (returned), what
    `stagewise eval policy` and `run --policy` load. A policy trained with each action held K > 1 steps says so in
    the graph's metadata, and the runtime then holds its actions K steps, as in training. `embeddings`
    ({encoder_sha256, views, size}): the policy reads a reward model's frame embeddings before `state_names`
    (`stagewise learn --obs embeddings`); the runtime feeds them from that model and refuses another. `pixels`
    ({views, width, height}): the policy reads those views' raw frames before `state_names` (`--obs pixels`)."""
    extra: Dict[str, Any] = {"action_repeat": action_repeat, "state_names": list(state_names)}
    if embeddings:
        extra["embeddings"] = dict(embeddings)
    if pixels:
        extra["pixels"] = dict(pixels)
    return write_policy(out_dir, name, actor_onnx(agent), task=task, state_size=len(state_names),
                        action_size=agent.actor.act, description=description, extra=extra)
