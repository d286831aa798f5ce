"""stagewise.training.train_dataset's `--failed-tau`: which targets of a failed episode change, from the labels a
person gives (stage starts, success flag) alone."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from stagewise.training import train as tr  # noqa: E402
from stagewise.training.train_dataset import failed_targets  # noqa: E402


def test_zero_holds_a_failed_episodes_unfinished_stage_and_nothing_else():
    # episode 0: a success, stages 0,0,1,1,2,2 ; episode 1: a failure that ended in stage 1 ; episode 2: no flag
    stage = np.array([0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 1, 0, 1], dtype=np.int64)
    tau = np.array([0, .5, 0, .5, 0, 1, 0, .5, 0, .4, .8, 0, .5], dtype=np.float32)
    eps = [
        {"offset": 0, "length": 6, "success": True},
        {"offset": 6, "length": 5, "success": False},
        {"offset": 11, "length": 2},
    ]
    got, known = failed_targets(stage, tau, eps, "zero")
    want = tau.copy()
    want[8:11] = 0.0  # the failure's last stage (1) only; its finished stage 0 keeps SARM's rise
    np.testing.assert_array_equal(got, want)
    assert known.all()
    got, known = failed_targets(stage, tau, eps, "linear")
    np.testing.assert_array_equal(got, tau)
    assert known.all()
    got, known = failed_targets(stage, tau, eps, "mask")
    np.testing.assert_array_equal(known, (np.arange(13) < 8) | (np.arange(13) >= 11))
    assert tau[9] == pytest.approx(0.4), "the caller's array is not changed"


def test_masked_frames_train_the_stage_head_only():
    t = torch.tensor
    # the masked sample's huge error does not count: the weighted mean is the known sample's alone
    w = tr.and_weights(None, t([True, False]))
    assert float(tr.wmean(t([1.0, 100.0]), w)) == pytest.approx(1.0)
    assert float(tr.wmean(t([1.0, 100.0]), tr.and_weights(t([2.0, 1.0]), t([False, False])))) == 0.0
    # a step whose pair holds a masked frame is left out of the step-change loss
    got = tr.step_change_loss(t([0.1, 0.5]), t([0.13, 0.9]), t([0.1, 0.2]), t([0.1, 0.2]), 0.05, t([True, False]))
    assert float(got) == pytest.approx(0.03**2, rel=1e-4)


def test_tau_only_from_the_named_datasets():
    from stagewise.training.train_dataset import tau_only_from

    eps = [
        {"dataset": "demos", "offset": 0, "length": 3, "success": True},
        {"dataset": "rollouts", "offset": 3, "length": 3, "success": True},
        {"dataset": "rollouts", "offset": 6, "length": 2, "success": False},
    ]
    known = np.ones(8, dtype=bool)
    got = tau_only_from(known, eps, ["demos"])
    # the demos keep every target; the rollouts only a success's last frame (progress 1 by its outcome)
    assert got.tolist() == [True, True, True, False, False, True, False, False]
    assert known.all(), "the caller's array is not changed"
    assert tau_only_from(known, eps, []).all()
