"""A zenoh router on one endpoint, as its own process: where `stagewise learn --from-stream` meets the actors it
starts (each a zenoh client of it), so that a learner that restarts finds the actors still connected to the router,
not to the learner's own session. `python -m stagewise.rl.router tcp/127.0.0.1:PORT` (loopback only, no
scouting: it trusts nobody else); it runs until killed, and dies with its parent (Linux)."""

from __future__ import annotations

import json
import sys
import time


def main(argv=None) -> int:
    import zenoh

    from ..launch import _die_with_parent

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].startswith("tcp/127.0.0.1:"):
        print("usage: python -m stagewise.rl.router tcp/127.0.0.1:PORT (a loopback endpoint)", file=sys.stderr)
        return 2
    _die_with_parent()
    conf = zenoh.Config()
    conf.insert_json5("mode", json.dumps("router"))
    conf.insert_json5("listen/endpoints", json.dumps([args[0]]))
    conf.insert_json5("connect/endpoints", json.dumps([]))
    conf.insert_json5("scouting/multicast/enabled", "false")
    conf.insert_json5("scouting/gossip/enabled", "false")
    with zenoh.open(conf):
        print(f"router listening on {args[0]}", flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
