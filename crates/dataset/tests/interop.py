"""Reads a dataset written by stagewise-dataset with pyarrow, the way LeRobot v3 does, and checks the contract.

Usage: interop.py DATASET_DIR EXPECT_JSON
       interop.py --write-like-lerobot DATASET_DIR   (write files the way LeRobot's Python does, for Rust to read)
EXPECT_JSON (written by tests/interop.rs) holds the values the Rust side wrote: frame counts, stage names,
reward_model_path and a few pixels to compare after decoding a PNG with this file's own decoder (no PIL/numpy).
"""

import json
import struct
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


def decode_png_rgb(data: bytes):
    """Minimal PNG decoder for 8-bit RGB, non-interlaced images: returns (width, height, rows of bytes)."""
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "PNG signature")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        ctype = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        check(zlib.crc32(ctype + body) & 0xFFFFFFFF == crc, f"PNG chunk {ctype!r} CRC")
        if ctype == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif ctype == b"IDAT":
            idat += body
        elif ctype == b"IEND":
            break
        pos += 12 + length
    width, height, depth, color, _, _, interlace = ihdr
    check((depth, color, interlace) == (8, 2, 0), f"PNG is 8-bit RGB non-interlaced: {ihdr}")
    raw = zlib.decompress(idat)
    stride = width * 3
    check(len(raw) == height * (stride + 1), "PNG data size")
    rows, prev = [], bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b = prev[i]
            c = prev[i - 3] if i >= 3 else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa_, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa_ <= pb and pa_ <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
            else:
                check(ftype == 0, f"PNG filter type {ftype}")
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def main(root: Path, expect: dict):
    info = json.loads((root / "meta/info.json").read_text())
    check(info["codebase_version"] == "v3.0", "codebase_version")
    check(info["fps"] == expect["fps"], "fps")
    check(info["total_episodes"] == expect["episodes"], "total_episodes")
    check(info["total_frames"] == expect["frames"], "total_frames")
    check(info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet", "data_path")
    check(info["chunks_size"] == 1000, "chunks_size")
    feats = info["features"]
    for key, ft in feats.items():
        check(set(ft) >= {"dtype", "shape", "names"}, f"feature {key} has dtype/shape/names")
        check(isinstance(ft["shape"], list), f"feature {key} shape is a list")
    defaults = {"timestamp": "float32", "frame_index": "int64", "episode_index": "int64", "index": "int64",
                "task_index": "int64"}
    for key, dtype in defaults.items():
        check(feats[key]["dtype"] == dtype and feats[key]["shape"] == [1], f"default feature {key}")
    image_keys = [k for k, f in feats.items() if f["dtype"] == "image"]
    check(image_keys == expect["image_keys"], "image keys")
    for k in image_keys:
        check(feats[k]["shape"] == [expect["height"], expect["width"], 3], f"{k} shape")
        check(feats[k]["names"] == ["height", "width", "channels"], f"{k} names")

    # Data files: every feature is a column with the dtype LeRobot's HF features give it.
    data_files = sorted((root / "data").glob("chunk-*/file-*.parquet"))
    check(len(data_files) >= 1, "data files")
    table = pa.concat_tables([pq.read_table(p) for p in data_files])
    check(set(table.column_names) == set(feats), f"data columns {table.column_names}")
    check(table.num_rows == expect["frames"], "data rows")
    for key, ft in feats.items():
        t = table.schema.field(key).type
        if ft["dtype"] == "image":
            check(pa.types.is_struct(t) and t.get_field_index("bytes") >= 0 and t.get_field_index("path") >= 0,
                  f"{key} is struct<bytes, path>")
            check(pa.types.is_binary(t.field("bytes").type), f"{key}.bytes is binary")
            check(pa.types.is_string(t.field("path").type), f"{key}.path is string")
        elif ft["shape"] == [1]:
            check(str(t) == ft["dtype"].replace("float32", "float").replace("float64", "double"), f"{key}: {t}")
        else:
            check(pa.types.is_fixed_size_list(t) and t.list_size == ft["shape"][0], f"{key} fixed_size_list: {t}")
            check(t.value_type == pa.float32(), f"{key} values float32")
    index = table.column("index").to_pylist()
    check(index == list(range(expect["frames"])), "index is 0..N")
    state0 = table.column("observation.state")[0].as_py()
    check(all(abs(a - b) < 1e-6 for a, b in zip(state0, expect["state0"])), "observation.state row 0")

    # Decode PNGs and compare pixels.
    for key, row, x, y, rgb in expect["pixels"]:
        cell = table.column(key)[row].as_py()
        w, h, rows = decode_png_rgb(cell["bytes"])
        check((w, h) == (expect["width"], expect["height"]), "PNG size")
        check(list(rows[y][3 * x : 3 * x + 3]) == rgb, f"pixel {key} row {row} ({x},{y})")

    # Episode metadata.
    ep_files = sorted((root / "meta/episodes").glob("chunk-*/file-*.parquet"))
    eps = pa.concat_tables([pq.read_table(p) for p in ep_files])
    needed = {"episode_index": pa.int64(), "length": pa.int64(), "dataset_from_index": pa.int64(),
              "dataset_to_index": pa.int64(), "data/chunk_index": pa.int64(), "data/file_index": pa.int64(),
              "meta/episodes/chunk_index": pa.int64(), "meta/episodes/file_index": pa.int64(),
              "tasks": pa.list_(pa.string()), "sparse_subtask_names": pa.list_(pa.string()),
              "sparse_subtask_start_frames": pa.list_(pa.int64()), "sparse_subtask_end_frames": pa.list_(pa.int64())}
    for col, typ in needed.items():
        check(col in eps.column_names, f"episodes column {col}")
        check(eps.schema.field(col).type.equals(typ), f"episodes {col} type {eps.schema.field(col).type}")
    check(eps.column("length").to_pylist() == expect["lengths"], "episode lengths")
    names = eps.column("sparse_subtask_names").to_pylist()
    check(names == expect["stage_names_per_episode"], f"sparse_subtask_names {names}")
    ends = eps.column("sparse_subtask_end_frames").to_pylist()
    for L, e in zip(expect["lengths"], ends):
        check(e is None or e[-1] == L, "last stage ends at the episode length")

    # tasks.parquet: pandas index `task`.
    tasks = pq.read_table(root / "meta/tasks.parquet")
    check(tasks.schema.field("task_index").type == pa.int64(), "tasks.task_index int64")
    check(tasks.schema.field("task").type == pa.string(), "tasks.task string")
    pmeta = json.loads(tasks.schema.metadata[b"pandas"])
    check(pmeta["index_columns"] == ["task"], "tasks pandas index is `task`")
    check(tasks.column("task").to_pylist() == expect["tasks"], "task strings")
    try:
        import pandas  # noqa: F401
        df = pq.read_table(root / "meta/tasks.parquet").to_pandas()
        check(df.index.name == "task" and df.loc[expect["tasks"][0]].task_index == 0, "pandas tasks index")
    except ImportError:
        pass

    props = json.loads((root / "meta/temporal_proportions_sparse.json").read_text())
    check(list(props) == expect["stage_names"], "temporal proportions order")
    check(abs(sum(props.values()) - 1.0) < 1e-9, "temporal proportions sum to 1")

    stats = json.loads((root / "meta/stats.json").read_text())
    for key in ["action", "observation.state", "index", "timestamp"] + image_keys:
        check(set(stats[key]) >= {"min", "max", "mean", "std", "count"}, f"stats {key}")
    for key in image_keys:
        m = stats[key]["mean"]
        check(len(m) == 3 and all(len(c) == 1 and len(c[0]) == 1 for c in m), f"stats {key} shape (3,1,1)")

    # sarm_progress.parquet, read the way LeRobot's compute_rabc_weights.py / rabc.py do.
    prog = root / "sarm_progress.parquet"
    md = pq.read_metadata(prog).schema.to_arrow_schema().metadata
    check(md is not None and md[b"reward_model_path"].decode() == expect["reward_model_path"], "reward_model_path")
    t = pq.read_table(prog)
    check(t.column_names == ["index", "episode_index", "frame_index", "progress_sparse", "progress_dense"],
          f"sarm_progress columns {t.column_names}")
    for col, typ in [("index", pa.int64()), ("episode_index", pa.int64()), ("frame_index", pa.int64()),
                     ("progress_sparse", pa.float32()), ("progress_dense", pa.float32())]:
        check(t.schema.field(col).type == typ, f"sarm_progress {col} is {typ}")
    idx = t.column("index").to_pylist()
    check(idx == sorted(idx) and len(idx) == expect["frames"], "sarm_progress sorted by index")
    check(t.schema.metadata[b"reward_model_path"].decode() == expect["reward_model_path"], "arrow schema metadata")
    sparse = t.column("progress_sparse").to_pylist()
    check(all(abs(a - b) < 1e-6 for a, b in zip(sparse, expect["progress_sparse"])), "progress_sparse values")

    print(f"interop: {checks} checks passed")


def write_like_lerobot(root: Path):
    """Writes files the way LeRobot's Python does, for the Rust reader: sarm_progress.parquet as in
    compute_rabc_weights.py (numpy int64/float32 columns, dense head too, schema metadata replaced by
    reward_model_path), and the data file re-written with variable-length `list<float>` vectors and
    `large_binary` image bytes (what pyarrow/pandas produce without HF features)."""
    import numpy as np

    n = json.loads((root / "meta/info.json").read_text())["total_frames"]
    table = pa.table({
        "index": np.arange(n, dtype=np.int64)[::-1].copy(),
        "episode_index": np.zeros(n, dtype=np.int64),
        "frame_index": np.arange(n, dtype=np.int64)[::-1].copy(),
        "progress_sparse": np.linspace(1.0, 0.0, n, dtype=np.float32),
        "progress_dense": np.full(n, np.nan, dtype=np.float32),
    })
    table = table.replace_schema_metadata({b"reward_model_path": b"pepijn223/sarm_single_uni4"})
    pq.write_table(table, root / "sarm_progress.parquet")

    path = root / "data/chunk-000/file-000.parquet"
    data = pq.read_table(path)
    cols = {}
    for name in data.column_names:
        col = data.column(name)
        if pa.types.is_fixed_size_list(col.type):
            col = pa.array(col.to_pylist(), type=pa.list_(pa.float32()))
        elif pa.types.is_struct(col.type):
            col = pa.array(col.to_pylist(), type=pa.struct([("bytes", pa.large_binary()), ("path", pa.string())]))
        cols[name] = col
    pq.write_table(pa.table(cols), path, compression="snappy")
    print("interop: wrote LeRobot-style files")


if __name__ == "__main__":
    if sys.argv[1] == "--write-like-lerobot":
        write_like_lerobot(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()))
