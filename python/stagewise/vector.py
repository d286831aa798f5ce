"""`StagewiseVectorEnv`: a gymnasium VectorEnv over the N envs of one `stagewise serve --envs N`, the vector entry
point of the gymnasium ids (`gymnasium.make_vec("stagewise/PushTarget-v0", num_envs=4, reward="oracle")`).

Each step sends the N step queries at once and then reads the N replies, so the server's N threads step in
parallel. Autoreset as gymnasium's own vector envs (`autoreset_mode`, default NEXT_STEP: the step after an
episode ends resets that env and returns its first observation with reward 0). The server truncates episodes
itself at `max_episode_steps` (the id's default: the simulator's). For SB3, `stagewise.vec_env.StagewiseVecEnv`
is the same over SB3's VecEnv API."""

from __future__ import annotations

from copy import deepcopy
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from .env import StagewiseEnv
from .registration import MAX_EPISODE_STEPS, NO_LIMIT, OwnedServe, ServeOptions, check_joined, connect
from .session import DEFAULT_ROBOT, open_session, robot_names


class StagewiseVectorEnv(VectorEnv):
    """N served envs as one gymnasium VectorEnv; the keyword arguments are those of
    :class:`stagewise.registration.TaskEnv` (reward, shaping, cameras, `endpoint`/`robot_name` to join a running
    `serve --envs N`, whose envs are `<robot>-0 .. <robot>-(N-1)`), plus `num_envs`, `max_episode_steps` (the
    server's `--max-steps`; None or -1: none) and `autoreset_mode`. A server it starts is its child and
    :meth:`close` ends it."""

    def __init__(
        self,
        num_envs: int = 1,
        task: str = "push-target",
        *,
        max_episode_steps: Optional[int] = None,
        autoreset_mode: Union[str, AutoresetMode] = AutoresetMode.NEXT_STEP,
        reward: Optional[str] = None,
        model: Optional[str] = None,
        gamma: Optional[float] = None,
        shaping_scale: Optional[float] = None,
        shaping: Optional[str] = None,
        potential_scale: Optional[float] = None,
        success_progress_one: Optional[bool] = None,
        phi_offset: Optional[float] = None,
        width: Optional[int] = None,
        height: Optional[int] = None,
        images: bool = False,
        render_mode: Optional[str] = None,
        serve_args: Sequence[str] = (),
        endpoint: Optional[str] = None,
        robot_name: Optional[str] = None,
        timeout: float = 10.0,
        connect_timeout: float = 60.0,
    ):
        super().__init__()
        self.server: Optional[OwnedServe] = None
        self.session = None
        self.envs: List[StagewiseEnv] = []
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r}: an int >= 1")
        try:
            self.autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(f"autoreset_mode={autoreset_mode!r}: NEXT_STEP or SAME_STEP (gymnasium's AutoresetMode)"
                             ) from None
        if self.autoreset_mode == AutoresetMode.DISABLED:
            raise ValueError("autoreset_mode=DISABLED: NEXT_STEP or SAME_STEP (the envs reset themselves)")
        if max_episode_steps is not None and (not isinstance(max_episode_steps, int) or max_episode_steps == 0
                                              or max_episode_steps < -1):
            raise ValueError(f"max_episode_steps={max_episode_steps!r}: an int >= 1, or None / -1 for no limit")
        opts = ServeOptions(reward, model, gamma, shaping_scale, shaping, potential_scale, success_progress_one,
                            phi_offset, width, height, tuple(serve_args))
        if endpoint is None:
            opts.validate(task)
        else:
            ServeOptions(reward=reward, gamma=gamma).validate(task)
            if any((model, width, height, serve_args)) or max_episode_steps not in (None, MAX_EPISODE_STEPS[task]):
                raise ValueError("model, width, height, serve_args, max_episode_steps: options of the server this "
                                 "env would start; with endpoint= the running server has its own")
        robot = robot_name or DEFAULT_ROBOT
        if endpoint is None:
            limit = NO_LIMIT if max_episode_steps in (None, -1) else max_episode_steps
            self.server = OwnedServe(opts.argv(task, num_envs, robot, limit, images or render_mode is not None))
        try:
            where = endpoint or self.server.endpoint
            self.session = open_session(where)
            for name in robot_names(robot, num_envs):
                self.envs.append(connect(name, lambda wait, name=name: StagewiseEnv(
                    name, connect=where, session=self.session, timeout=timeout, connect_timeout=wait, gamma=gamma,
                    render_mode=render_mode, observe_images=images), server=self.server, endpoint=where,
                    patience=connect_timeout))
                if endpoint is not None:
                    check_joined(self.envs[-1], opts)
        except BaseException:
            self._keep_log = True
            self.close()
            raise
        first = self.envs[0]
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.metadata = {**first.metadata, "autoreset_mode": self.autoreset_mode}
        self.spec_msg: Dict[str, Any] = first.spec_msg
        self.reward_spec = first.reward_spec
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._obs = create_empty_array(self.single_observation_space, n=num_envs, fn=np.zeros)
        self._env_obs: List[Any] = [None] * num_envs
        self._rewards = np.zeros(num_envs, np.float64)
        self._terminations = np.zeros(num_envs, np.bool_)
        self._truncations = np.zeros(num_envs, np.bool_)
        self._autoreset = np.zeros(num_envs, np.bool_)

    def reset(self, *, seed: Union[int, Sequence[Optional[int]], None] = None, options: Optional[dict] = None):
        """Resets every env (`seed` int s: env i gets s + i; a list: one per env), or those of
        `options["reset_mask"]` (a bool array)."""
        if seed is None:
            seeds: List[Optional[int]] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed: {len(seeds)} seeds for {self.num_envs} envs")
        mask = np.ones(self.num_envs, np.bool_)
        if options and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"])
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
                raise ValueError(f"options['reset_mask']: a bool array of shape ({self.num_envs},), got {mask!r}")
        infos: Dict[str, Any] = {}
        for i in np.flatnonzero(mask):
            self._env_obs[i], info = self.envs[i].reset(seed=seeds[i])
            self._terminations[i] = self._truncations[i] = self._autoreset[i] = False
            infos = self._add_info(infos, info, i)
        self._obs = concatenate(self.single_observation_space, self._env_obs, self._obs)
        return deepcopy(self._obs), infos

    def step(self, actions):
        acts = list(iterate(self.action_space, actions))
        same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        pending = {i: env.step_async(acts[i]) for i, env in enumerate(self.envs) if not self._autoreset[i]}
        infos: Dict[str, Any] = {}
        for i, env in enumerate(self.envs):
            if i in pending:
                continue  # NEXT_STEP: the env that ended last step resets now, while the others step
            self._env_obs[i], info = env.reset()
            self._rewards[i], self._terminations[i], self._truncations[i] = 0.0, False, False
            infos = self._add_info(infos, info, i)
        for i, p in pending.items():
            obs, self._rewards[i], self._terminations[i], self._truncations[i], info = self.envs[i].step_wait(p)
            if same_step and (self._terminations[i] or self._truncations[i]):
                infos = self._add_info(infos, {"final_obs": obs, "final_info": info}, i)
                obs, info = self.envs[i].reset()
            self._env_obs[i] = obs
            infos = self._add_info(infos, info, i)
        self._obs = concatenate(self.single_observation_space, self._env_obs, self._obs)
        if not same_step:
            self._autoreset = np.logical_or(self._terminations, self._truncations)
        return (deepcopy(self._obs), np.copy(self._rewards), np.copy(self._terminations),
                np.copy(self._truncations), infos)

    def render(self):
        """Each env's frames (see StagewiseEnv.render), with render_mode='rgb_array'."""
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs):
        for env in self.envs:
            env.close()
        if self.session is not None:
            self.session.close()
            self.session = None
        if self.server is not None:
            self.server.stop(getattr(self, "_keep_log", False))
