"""LeRobot reads a `stagewise record --video` dataset: a manual check, not run by `cargo test` (it needs LeRobot,
Python >= 3.12 and about 5 GB of packages).

    python3.12 -m venv /tmp/lr && /tmp/lr/bin/pip install "lerobot[dataset]==0.6.1"
    stagewise record --task pick-place --episodes 4 --degraded 0.5 --width 32 --height 32 --video --out /tmp/av1
    stagewise record --task pick-place --episodes 4 --degraded 0.5 --width 32 --height 32 --out /tmp/png
    /tmp/lr/bin/python crates/dataset/tests/lerobot_video_check.py /tmp/av1 /tmp/png

Opens the video dataset with `LeRobotDataset(root=...)` (PyAV backend), takes every 7th frame of every camera
and prints its PSNR against the same frame of the PNG recording (same seeds), and against the next frame.
Measured (crates/dataset/README.md): front 34.83, side 34.06, wrist 30.86 dB, the numbers our reader gets.
"""

import io, sys, numpy as np, pyarrow.parquet as pq
from PIL import Image
from lerobot.datasets.lerobot_dataset import LeRobotDataset
vid, png = sys.argv[1], sys.argv[2]
ds = LeRobotDataset("local/own-task-av1", root=vid, video_backend="pyav")
print("LeRobot opened:", ds.num_episodes, "episodes", ds.num_frames, "frames, video keys", ds.meta.video_keys, "fps", ds.fps)
t = pq.read_table(f"{png}/data/chunk-000/file-000.parquet")
def psnr(a, b):
    mse = ((a.astype(float) - b.astype(float)) ** 2).mean()
    return 99.0 if mse == 0 else 10 * np.log10(255 ** 2 / mse)
for key in ds.meta.video_keys:
    col = t.column(key).combine_chunks().field("bytes").to_pylist()
    ref = [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in col]
    own, nb = [], []
    for i in range(0, ds.num_frames, 7):
        x = ds[i][key]  # float CHW in [0, 1]
        got = (x.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        own.append(psnr(got, ref[i]))
        if i + 1 < ds.num_frames:
            nb.append(psnr(got, ref[i + 1]))
    print(f"{key}: LeRobot-decoded vs PNG recording PSNR mean {np.mean(own):.2f} dB (min {np.min(own):.2f}); vs the next frame {np.mean(nb):.2f} dB; {len(own)} frames")
ep = ds.meta.episodes[1]
print("episode 1 video columns:", {k: ep[k] for k in ep.keys() if k.startswith("videos/") and "front" in k})
