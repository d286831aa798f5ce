"""`StagewiseVecEnv`: N served envs stepped concurrently, as a Stable-Baselines3 VecEnv.

`stagewise serve --envs N` serves env i as robot `<robot>-<i>`, each on its own server thread; this VecEnv
sends the N step queries at once and then collects the replies, so the envs step in parallel (SB3's
DummyVecEnv would step them one after another)."""

from __future__ import annotations

from copy import deepcopy
from typing import Optional, Sequence, Union

import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv

from .env import StagewiseEnv
from .session import DEFAULT_ROBOT, open_session, robot_names  # noqa: F401 (robot_names: re-exported)


class StagewiseVecEnv(DummyVecEnv):
    """SB3 VecEnv over the envs of one `stagewise serve --envs N` (one shared zenoh session).

    Extra keyword arguments go to each :class:`StagewiseEnv` (timeout, gamma, ...)."""

    def __init__(
        self,
        n_envs: int,
        robot: str = DEFAULT_ROBOT,
        *,
        connect: Union[str, Sequence[str], None] = None,
        session=None,
        **kwargs,
    ):
        self._own_session = session is None
        self.session = session if session is not None else open_session(connect)
        envs = [StagewiseEnv(r, session=self.session, **kwargs) for r in robot_names(robot, n_envs)]
        super().__init__([lambda e=e: e for e in envs])

    def step_wait(self):
        pending = [env.step_async(a) for env, a in zip(self.envs, self.actions)]
        results = [env.step_wait(p) for env, p in zip(self.envs, pending)]
        done_idx = []
        for i, (obs, rew, terminated, truncated, info) in enumerate(results):
            self.buf_rews[i] = rew
            self.buf_dones[i] = terminated or truncated
            info["TimeLimit.truncated"] = truncated and not terminated
            self.buf_infos[i] = info
            if self.buf_dones[i]:
                info["terminal_observation"] = obs
                done_idx.append(i)
            else:
                self._save_obs(i, obs)
        for i in done_idx:
            obs, self.reset_infos[i] = self.envs[i].reset()
            self._save_obs(i, obs)
        return self._obs_from_buf(), np.copy(self.buf_rews), np.copy(self.buf_dones), deepcopy(self.buf_infos)

    def close(self) -> None:
        super().close()
        if self._own_session and self.session is not None:
            self.session.close()
            self.session = None
