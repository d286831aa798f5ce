"""Opening a zenoh session to reach a Stagewise runtime."""

from __future__ import annotations

import json
from typing import Iterable, Optional, Sequence, Union

import zenoh

DEFAULT_ROBOT = "sim0"


#: Where `stagewise run`, `serve` and `replay` listen by default (loopback only), and so where a session
#: connects when it is given no endpoint.
DEFAULT_ENDPOINT = "tcp/127.0.0.1:7447"


def open_session(
    connect: Union[str, Sequence[str], None] = None,
    *,
    listen: Union[str, Sequence[str], None] = None,
    multicast: Optional[bool] = None,
    config_file: Optional[str] = None,
    mode: str = "peer",
) -> zenoh.Session:
    """Opens a zenoh session (an embedded peer, like the Rust side).

    `connect`: endpoints such as ``"tcp/127.0.0.1:7447"`` (where `stagewise serve --listen` listens); by default
    `DEFAULT_ENDPOINT`, the loopback port a `stagewise` process listens on when not told otherwise.
    `multicast`: multicast scouting, off by default (like the Rust side: nothing is discovered on the LAN
    unless asked); `multicast=True` without `connect` discovers peers instead of connecting to the default.
    `listen` defaults to none, so that the session opens no port of its own. With `config_file`, the file
    decides what the arguments do not say."""
    conf = zenoh.Config.from_file(config_file) if config_file else zenoh.Config()
    conf.insert_json5("mode", json.dumps(mode))
    endpoints = _endpoints(connect)
    if not endpoints and not multicast and not config_file:
        endpoints = [DEFAULT_ENDPOINT]
    if endpoints:
        conf.insert_json5("connect/endpoints", json.dumps(endpoints))
    if listen is not None or not config_file:
        conf.insert_json5("listen/endpoints", json.dumps(_endpoints(listen)))
    if multicast is not None or not config_file:
        conf.insert_json5("scouting/multicast/enabled", json.dumps(bool(multicast)))
    return zenoh.open(conf)


def _endpoints(e: Union[str, Iterable[str], None]) -> list:
    if e is None:
        return []
    if isinstance(e, str):
        return [e]
    return list(e)


def robot_names(robot: str, n: int) -> list:
    """The robot names `stagewise serve --robot-name R --envs N` serves: `R` for one env, else `R-0 .. R-(N-1)`."""
    return [robot] if n == 1 else [f"{robot}-{i}" for i in range(n)]


def keys(robot: str) -> dict:
    """The key expressions of a robot (docs/wire.md)."""
    base = f"stagewise/{robot}"
    return {
        "transition": f"{base}/transition",
        "progress": f"{base}/progress",
        "episode": f"{base}/episode",
        "policy": f"{base}/policy",
        "env_reset": f"{base}/env/reset",
        "env_step": f"{base}/env/step",
        "alive": f"{base}/alive",
    }
