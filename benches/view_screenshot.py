"""A screenshot of the real Rerun viewer on a recording, without a screen: the viewer of the pinned rerun-sdk
runs headless (offscreen rendering through wgpu) and saves what it shows (docs/view.png).

    .venv/bin/python benches/view_screenshot.py RUN.rrd docs/view.png --step 60

Needs a graphics adapter; on a machine without a GPU, Mesa's software Vulkan driver (lavapipe; Debian:
`apt-get install mesa-vulkan-drivers`) with WGPU_BACKEND=vulkan. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rrd", type=Path)
    ap.add_argument("png", type=Path)
    ap.add_argument("--step", type=int, default=60, help="where the time cursor stands")
    ap.add_argument("--port", type=int, default=9878)
    ap.add_argument("--settle", type=float, default=8.0, help="seconds for the viewer to load and lay out")
    args = ap.parse_args()
    os.environ.setdefault("WGPU_BACKEND", "vulkan")
    from rerun.experimental import ViewerClient

    viewer = ViewerClient.spawn(
        headless=True,
        port=args.port,
        hide_welcome_screen=True,
        executable_path=str(Path(sys.executable).parent / "rerun"),
    )
    try:
        viewer.open(str(args.rrd.resolve()))
        time.sleep(args.settle)
        viewer.set_time("step", sequence=args.step)
        time.sleep(2.0)
        viewer.save_screenshot(str(args.png.resolve()))
    finally:
        viewer.quit()
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
