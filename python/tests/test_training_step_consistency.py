"""stagewise.training.train's `--step-consistency`: the loss on the model's change of phi over one step, the frame
pairs it is taken on, and a short training run with it on a synthetic set (no simulator needed)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from stagewise.training import train as tr  # noqa: E402


def flat(lengths, seed=0, v=2, h=16, w=16):
    """A train.Flat-shaped set: episodes of the given lengths, progress a ramp per episode, frames whose brightness
    follows the progress (plus noise), so the network can read it."""
    rng = np.random.default_rng(seed)
    f = object.__new__(tr.Flat)
    phi, start, end = [], [], []
    off = 0
    for n in lengths:
        phi.append(np.linspace(0.0, 1.0, n, dtype=np.float32))
        start.append(np.full(n, off))
        end.append(np.full(n, off + n))
        off += n
    f.phi = np.concatenate(phi)
    f.phi_gt = f.phi
    f.start, f.end = np.concatenate(start), np.concatenate(end)
    f.n = off
    props = np.array([0.2, 0.15, 0.65])
    P = np.concatenate([[0.0], np.cumsum(props)[:-1]])
    f.stage = np.clip(np.searchsorted(P, f.phi, side="right") - 1, 0, 2).astype(np.int64)
    f.tau = np.clip((f.phi - P[f.stage]) / props[f.stage], 0, 1).astype(np.float32)
    base = (40 + 170 * f.phi)[:, None, None, None, None]
    f.images = np.clip(base + rng.normal(0, 20, (off, v, h, w, 3)), 0, 255).astype(np.uint8)
    f.state = rng.normal(0, 1, (off, 1)).astype(np.float32)
    f.success = np.ones(off, dtype=bool)
    f.ep = np.repeat(np.arange(len(lengths)), lengths)
    return f, props


def test_next_frames_stay_in_the_episode():
    f, _ = flat([3, 4])
    assert tr.next_frames(f, np.arange(7)).tolist() == [1, 2, 2, 4, 5, 6, 6]


def test_step_change_loss_compares_changes_and_leaves_out_target_jumps():
    t = torch.tensor
    # a model that follows the target's change exactly: 0
    assert float(tr.step_change_loss(t([0.1, 0.5]), t([0.11, 0.52]), t([0.2, 0.3]), t([0.21, 0.32]), 0.05)) == pytest.approx(0.0, abs=1e-12)
    # a level offset costs nothing (that is the phi loss's job), a wrong change does: (0.03 - 0.01)^2
    got = float(tr.step_change_loss(t([0.4]), t([0.43]), t([0.2]), t([0.21]), 0.05))
    assert got == pytest.approx(0.02**2, rel=1e-4)
    # the second pair's target jumps by 0.4 (a stage change): left out, so the mean is over the first pair only
    got = float(tr.step_change_loss(t([0.1, 0.5]), t([0.13, 0.5]), t([0.1, 0.2]), t([0.1, 0.6]), 0.05))
    assert got == pytest.approx(0.03**2, rel=1e-4)
    # only jumps: nothing to compare, 0 (not a division by zero)
    assert float(tr.step_change_loss(t([0.1]), t([0.9]), t([0.1]), t([0.9]), 0.05)) == 0.0


def test_training_with_step_consistency_runs_and_reports_the_term(capsys):
    train, props = flat([24, 30, 20])
    args = SimpleNamespace(
        seed=0, frames=2, stride=4, enc_channels=(8, 8, 8), coord=1, enc_min_size=4, lr=1e-3, epochs=2,
        samples_per_epoch=64, batch=16, balance_progress=0, shift=1, view_dropout=0.0, colour=0.0,
        state_dropout=0.5, eval_every=1, step_consistency=50.0, step_consistency_max=0.05,
    )
    model, _ = tr.train_progress(args, train, train, props, None)
    out = capsys.readouterr().out
    assert out.count("step-change MSE") == 2, out
    assert "val MAE" in out
