"""stagewise.training.train_dataset's `--failed-tau`: which targets of a failed episode change, from the labels a
person gives (stage starts, success flag) alone."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
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
    got = failed_targets(stage, tau, eps, "zero")
    want = tau.copy()
    want[8:11] = 0.0  # the failure's last stage (1) only; its finished stage 0 keeps SARM's rise
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(failed_targets(stage, tau, eps, "linear"), tau)
    assert tau[9] == pytest.approx(0.4), "the caller's array is not changed"
