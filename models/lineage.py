#!/usr/bin/env python3
"""Lineage manifests of the shipped reward models: models/<task>/lineage.json.

    python3 models/lineage.py            # (re)write models/{push-target,pick-place,stack}/lineage.json
    python3 models/lineage.py --check    # verify them against git and the shipped files; exit 1 on any difference

Checkpoints and intermediate weights are not in the tracked tree (issue 45); they stay in git history. A lineage
manifest names, for each shipped model, its chain of init graphs (each round fine-tuned from the one before, back to
the model trained from scratch) and per round every dataset it trained on: the recorded sets by their `stagewise
record` command, the learner-state sets by the policy checkpoints (ONNX + manifest) whose rollouts they hold, each
with its sha256 and a commit that holds it, so that `git show <commit>:<path>` restores it byte for byte.

Everything is read from git objects (`git ls-tree`, `git cat-file`), never from the working tree, so the script
works after the files left it. Which datasets a round trained on is read from that round's `.train.json` (train.py
writes its exact `--train` list there); this file only says where each dataset came from (DESCRIPTION below).
A file's `commit` is BASE (6d505fc, the last commit that holds every checkpoint) when BASE holds the bytes the
round used, else the last commit before the round that changed the file (only where it changed since).
Python 3.8+, standard library only; run from anywhere inside the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

BASE = "6d505fc"  # resolved to the full hash; holds every checkpoint named below
REPO = Path(__file__).resolve().parents[1]

# --- the declarative description -----------------------------------------------------------------------------------

REC = "stagewise record --width 32 --height 32"


def _expert(task: str, n: int, d: float) -> str:
    return (f"{REC} --task {task} --episodes {n} --degraded {d} --seed 0 --camera-jitter 0.01 --random-colors "
            f"--out data/{task}-train-n{n}-d{d}")


def _val(task: str) -> dict:
    return {
        f"data/{task}-val": f"{REC} --task {task} --episodes 12 --degraded 0.4 --seed 500000 --camera-jitter 0 "
                            f"--out data/{task}-val",
        f"data/{task}-val-colours": f"{REC} --task {task} --episodes 12 --degraded 0.4 --seed 510000 "
                                    f"--camera-jitter 0 --held-out-colors --out data/{task}-val-colours",
    }


def _random(task: str) -> str:
    return (f"{REC} --task {task} --episodes 400 --degraded 1 --presets random --seed 200000 --camera-jitter 0.01 "
            f"--random-colors --out data/{task}-random-n400")


# Datasets recorded by `stagewise record` alone (no policy): re-recordable from the command, with the simulator of
# the commit the round was trained at (`trained_at`).
RECORDED = {
    "data/push-target-train-n2000-d0.6": _expert("push-target", 2000, 0.6),
    "data/pick-place-train-n300-d0.4": _expert("pick-place", 300, 0.4),
    "data/stack-train-n300-d0.4": _expert("stack", 300, 0.4),
    "data/push-target-random-n400": _random("push-target"),
    "data/pick-place-random-n400": _random("pick-place"),
    "data/pp-nearplace-n150": f"{REC} --task pick-place --presets near-place --degraded 1 --episodes 150 "
                              f"--seed 3500000 --camera-jitter 0.01 --random-colors --out data/pp-nearplace-n150",
    **_val("push-target"), **_val("pick-place"), **_val("stack"),
}

S = "models/training/record_learner_states.sh"  # TASK OUT EPISODES NOISE SEED0 POLICY.toml... (policy i: SEED0 + 1000 i)
R = "benches/results"

# Learner-state datasets: data dir (train.py takes data/<dir>/<policy stem>) -> the committed policy directories
# (at BASE) and the command that recorded it (models/README.md, "Learner states" and "Round 7 ... 10";
# benches/learner_shaping.md for data/ppl6).
LEARNER = {
    "data/pol": ([f"models/training/learner-checkpoints/push-target"],
                 f"{S} push-target data/pol 20 0.2 300000 "
                 f"$(ls models/training/learner-checkpoints/push-target/*.toml | sort -V)"),
    "data/pol2": ([f"{R}/learner_shaping_push_sym/m1_sym_s{s}/policies" for s in (1, 2, 3)],
                  f"{S} push-target data/pol2 20 0.2 400000 "
                  f"$(ls {R}/learner_shaping_push_sym/m1_sym_s{{1,2,3}}/policies/*.toml | sort -V)"),
    **{f"data/pol3/s{s}": ([f"{R}/learner_shaping_push_r2/m2_s{s}/policies"],
                           f"{S} push-target data/pol3/s{s} 20 0.2 {480000 + 20000 * s} "
                           f"$(ls {R}/learner_shaping_push_r2/m2_s{s}/policies/*.toml | sort -V)")
       for s in (1, 2, 3)},
    **{f"data/pol4/s{s}": ([f"{R}/learner_shaping_push_r3/m3_s{s}/policies"],
                           f"{S} push-target data/pol4/s{s} 20 0.2 {600000 + 20000 * s} "
                           f"$(ls {R}/learner_shaping_push_r3/m3_s{s}/policies/push-target-model-*k.toml | sort -V)")
       for s in (1, 2, 3, 4, 5)},
    "data/ppl": (["models/training/learner-checkpoints/pick-place"],
                 f"{S} pick-place data/ppl 20 0.2 930000 "
                 f"$(ls models/training/learner-checkpoints/pick-place/*.toml | sort -V)"),
    "data/ppl_fixed": (["models/training/learner-checkpoints/pick-place"],
                       f"{S} pick-place data/ppl_fixed 20 0.2 930000 "
                       f"$(ls models/training/learner-checkpoints/pick-place/*.toml | sort -V)"),
    "data/ppl6/flip": ([f"{R}/learner_shaping_pick_flip/model_c10_nodemo_flip02x8_s0/policies"],
                       f"{S} pick-place data/ppl6/flip 30 0.2 2000000 "
                       f"$(ls {R}/learner_shaping_pick_flip/model_c10_nodemo_flip02x8_s0/policies/*.toml | sort -V)"),
    "data/ppl6/demo": ([f"{R}/learner_shaping_pick_demos/model_c3_demo20_s0/policies"],
                       f"{S} pick-place data/ppl6/demo 20 0.2 2100000 "
                       f"$(ls {R}/learner_shaping_pick_demos/model_c3_demo20_s0/policies/*.toml | sort -V)"),
    **{f"data/ppl7/pc_s{s}": ([f"{R}/learner_shaping_pick_consistency/pc_s{s}/policies"],
                              f"{S} pick-place data/ppl7/pc_s{s} 30 0.2 {2300000 + 100000 * s} "
                              f"$(ls {R}/learner_shaping_pick_consistency/pc_s{s}/policies/*-[0-9]*k.toml | sort -V)")
       for s in (0, 1, 2)},
    "data/ppl7/learned": (["models/policies/pick-place-learned"],
                          f"{S} pick-place data/ppl7/learned 60 0.3 2600000 "
                          f"models/policies/pick-place-learned/pick-place-learned.toml"),
    "data/ppl8/oracle_s3": ([f"{R}/learner_shaping_pick_r7/oracle_s3/policies"],
                            f"{S} pick-place data/ppl8/oracle_s3 30 0.2 2700000 "
                            f"$(ls {R}/learner_shaping_pick_r7/oracle_s3/policies/*-[0-9]*k.toml | grep -v -- -200k "
                            f"| sort -V)"),
    **{f"data/ppl8/m7_s{s}": ([f"{R}/learner_shaping_pick_r7/m7_s{s}/policies"],
                              f"{S} pick-place data/ppl8/m7_s{s} 20 0.2 {2800000 + 100000 * s} "
                              f"$(ls {R}/learner_shaping_pick_r7/m7_s{s}/policies/*-[0-9]*k.toml | sort -V)")
       for s in (0, 1, 2)},
    **{f"data/ppl9/m8_s{s}": ([f"{R}/learner_shaping_pick_r8/m8_s{s}/policies"],
                              f"{S} pick-place data/ppl9/m8_s{s} 20 0.2 {3100000 + 100000 * s} "
                              f"$(ls {R}/learner_shaping_pick_r8/m8_s{s}/policies/*-[0-9]*k.toml | sort -V)")
       for s in (0, 1, 2, 3)},
    **{f"data/ppl10/m8_p01_s{s}": ([f"{R}/learner_shaping_pick_pot/m8_p01_s{s}/policies"],
                                   f"{S} pick-place data/ppl10/m8_p01_s{s} 10 0.2 {4000000 + 100000 * s} "
                                   f"$(ls {R}/learner_shaping_pick_pot/m8_p01_s{s}/policies/*-[0-9]*k.toml | sort -V)")
       for s in range(8)},
    **{f"data/ppl10/m8_p03_s{s}": ([f"{R}/learner_shaping_pick_pot/m8_p03_s{s}/policies"],
                                   f"{S} pick-place data/ppl10/m8_p03_s{s} 10 0.2 {seed} "
                                   f"$(ls {R}/learner_shaping_pick_pot/m8_p03_s{s}/policies/*-[0-9]*k.toml | sort -V)")
       for s, seed in ((4, 4800000), (7, 4900000))},
    **{f"data/ppl11/sg_{run}": ([f"{R}/learner_shaping_pick_sg/{run}/policies"],
                                f"{S} pick-place data/ppl11/sg_{run} 10 0.2 {seed} "
                                f"$(ls {R}/learner_shaping_pick_sg/{run}/policies/*-[0-9]*k.toml | sort -V)")
       for run, seed in (("m9_p01_s0", 5100000), ("oracle_p01_s0", 5200000), ("m9_p01_spo_s9", 5300000),
                         ("oracle_p01_s7", 5400000))},
}

# Rounds 1-4 of push-target name data/pol's datasets after the checkpoints' names before they were committed
# ("oracle_s0-push-target-oracle-0-100k" for the committed push-target-oracle-0-100k; round 6 recorded them again
# under the committed names): strip this prefix to find the committed file.
ALIAS = {"data/pol": r"^oracle_s[01]-"}

PT = "models/push-target/push-target-progress"
PP = "models/pick-place/pick-place-progress"

# Per shipped model: where its files come from at BASE, and its chain of rounds, newest first. Each round is
# fine-tuned from the next (its `--init-onnx`); the last is trained from scratch. `graph` is the single ONNX graph
# as committed at `trained_at` (its `.train.json` beside it), `sha256_prefix` the hash models/README.md gives.
MODELS = [
    {
        "task": "push-target", "name": "push-target-progress", "shipped_from": "models/push-target",
        "chain": [
            {"round": "round 6 (shipped)", "graph": PT, "trained_at": "de1659e", "sha256_prefix": "6e500f4c"},
            {"round": "round 4", "graph": PT, "trained_at": "8eed4ce", "sha256_prefix": "a7a2374f"},
            {"round": "round 3", "graph": PT, "trained_at": "36677a9", "sha256_prefix": "2133c87e"},
            {"round": "round 2", "graph": PT, "trained_at": "57f992e", "sha256_prefix": "15cce2c9"},
            {"round": "round 1 (learner states)", "graph": PT, "trained_at": "c5eb058", "sha256_prefix": "b5ae2eaa"},
            {"round": "from scratch (push-target wrist camera)", "graph": PT, "trained_at": "eadc9be",
             "sha256_prefix": "67c9b2ea"},
        ],
        "notes": [
            "Round 6 is round 4's data and command with --step-consistency 400, fine-tuned from the round-4 graph.",
            "Rounds 5 and 7 (not shipped) are not in this chain; every checkpoint this chain trained on is committed.",
            "Trained on the simulator before the side-grasp change (sim/README.md, 'Holding'); record the datasets "
            "again at each round's trained_at commit to reproduce them byte for byte.",
        ],
    },
    {
        "task": "pick-place", "name": "pick-place-progress",
        "shipped_from": f"{R}/learner_shaping_pick_sg/model10",
        "chain": [
            {"round": "round 10 (shipped)", "graph": f"{R}/learner_shaping_pick_sg/model10/pick-place-progress",
             "trained_at": "f652b28", "sha256_prefix": "a05271b3"},
            {"round": "round 9", "graph": f"{R}/learner_shaping_pick_r9/model9/pick-place-progress",
             "trained_at": "a8b97cf", "sha256_prefix": "3b755f9a"},
            {"round": "round 8", "graph": f"{R}/learner_shaping_pick_r8/model8/pick-place-progress",
             "trained_at": "c878472", "sha256_prefix": "271b246c"},
            {"round": "round 7", "graph": f"{R}/learner_shaping_pick_r7/model7/pick-place-progress",
             "trained_at": "0d05f4f", "sha256_prefix": "7e5ede88"},
            {"round": "consistency model (round-1 data + --step-consistency 400 --step-consistency-max 0.05)",
             "graph": f"{R}/learner_shaping_pick_consistency/model/pick-place-progress",
             "trained_at": "dbb74a8", "sha256_prefix": "6acc35c6"},
            {"round": "round 1 (learner states; shipped 2026-12-04 to 2026-12-05)", "graph": PP,
             "trained_at": "57f992e", "sha256_prefix": "f6f0272c"},
            {"round": "from scratch (expert and degraded-expert episodes)", "graph": PP, "trained_at": "a88b79c",
             "sha256_prefix": "2e968d40"},
        ],
        "notes": [
            "Pick-place rounds 2-5 (2026-12-04/05, never shipped) are not in this chain: the consistency model was "
            "fine-tuned from round 1. Their data (data/ppl2-ppl5) came from checkpoints that lived under /tmp and "
            "were never committed, so they cannot be recorded again (models/README.md).",
            "data/ppl and data/ppl_fixed are the same 17 checkpoints, recorded again (same seeds) after an oracle fix.",
            "Round 10 is the first round trained for the side-grasp simulator; its new data (data/ppl11) was recorded "
            "there. Record the datasets again at each round's trained_at commit to reproduce them byte for byte.",
        ],
    },
    {
        "task": "pick-place", "name": "pick-place-hop", "shipped_from": "models/pick-place",
        "chain": [
            {"round": "from scratch (hop, expert and degraded-expert episodes)", "graph": "models/pick-place/pick-place-hop",
             "trained_at": "a88b79c", "sha256_prefix": "a772a04f"},
        ],
        "notes": ["Trained on recorded expert data only: no learner checkpoints."],
    },
    {
        "task": "stack", "name": "stack-progress", "shipped_from": "models/stack",
        "chain": [
            {"round": "from scratch (shipped)", "graph": "models/stack/stack-progress", "trained_at": "a88b79c",
             "sha256_prefix": "6dda28d1"},
        ],
        "notes": ["Trained on recorded expert data only: no learner checkpoints."],
    },
]

PARTS = (".onnx", ".encoder.onnx", ".head.onnx", ".step.onnx", ".toml", ".train.json")
TRAIN_KEYS = ("epochs", "samples_per_epoch", "lr", "targets", "balance_progress", "step_consistency",
              "step_consistency_max", "threads")

# --- git access ----------------------------------------------------------------------------------------------------


class Git:
    def __init__(self, root: Path):
        self.root = root
        self._trees: dict = {}
        self._blobs: dict = {}
        self._full: dict = {}
        self._last: dict = {}

    def run(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.root), *args], check=True, capture_output=True,
                              text=True).stdout

    def full(self, rev: str) -> str:
        if rev not in self._full:
            self._full[rev] = self.run("rev-parse", "--verify", rev + "^{commit}").strip()
        return self._full[rev]

    def blob_id(self, rev: str, path: str):
        """The blob id of path at rev, or None. Lists the whole directory once per (commit, dir)."""
        rev = self.full(rev)
        d = path.rsplit("/", 1)[0]
        key = (rev, d)
        if key not in self._trees:
            out = self.run("ls-tree", "-z", rev, d + "/")
            entries = {}
            for rec in out.split("\0"):
                if rec:
                    meta, name = rec.split("\t", 1)
                    _, kind, oid = meta.split()
                    if kind == "blob":
                        entries[name] = oid
            self._trees[key] = entries
        return self._trees[key].get(path)

    def read(self, oid: str) -> bytes:
        if oid not in self._blobs:
            self._blobs[oid] = subprocess.run(["git", "-C", str(self.root), "cat-file", "blob", oid], check=True,
                                              capture_output=True).stdout
        return self._blobs[oid]

    def last_change(self, rev: str, path: str) -> str:
        key = (rev, path)
        if key not in self._last:
            self._last[key] = self.run("log", "-1", "--format=%H", rev, "--", path).strip()
        return self._last[key]


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


class Build:
    def __init__(self, git: Git):
        self.git = git
        self.base = git.full(BASE)
        self.errors: list = []

    def file(self, path: str, used_at: str) -> dict:
        """{path, sha256, commit} of the bytes that were in use at `used_at`: commit BASE where BASE holds those
        bytes, else the last commit up to used_at that changed the file."""
        used = self.git.blob_id(used_at, path)
        at_base = self.git.blob_id(self.base, path)
        if used is None and at_base is None:
            raise SystemExit(f"lineage: {path} is neither at {used_at} nor at {BASE}")
        if used is None or used == at_base:  # committed after the round used it (recorded from the same run)
            oid, commit = at_base, self.base
        else:
            oid, commit = used, self.git.last_change(self.git.full(used_at), path)
        return {"path": path, "sha256": sha256(self.git.read(oid)), "commit": commit}

    def model(self, spec: dict, checkpoints: dict) -> dict:
        chain = []
        for i, rnd in enumerate(spec["chain"]):
            at = self.git.full(rnd["trained_at"])
            graph = self.file(rnd["graph"] + ".onnx", at)
            if not graph["sha256"].startswith(rnd["sha256_prefix"]):
                self.errors.append(f"{rnd['round']}: graph sha256 {graph['sha256'][:8]} != {rnd['sha256_prefix']}")
            tj = self.file(rnd["graph"] + ".train.json", at)
            tdoc = json.loads(self.git.read(self.git.blob_id(tj["commit"], tj["path"])))
            args = tdoc["args"]
            last = i == len(spec["chain"]) - 1
            if bool(args.get("init_onnx")) == last:
                self.errors.append(f"{rnd['round']}: init_onnx {args.get('init_onnx')!r} but "
                                   f"{'from scratch' if last else 'fine-tuned'} in the description")
            data = self.datasets(rnd["round"], args["train"], at, checkpoints)
            val = [args["val"], *args.get("val_extra", [])]
            chain.append({
                "round": rnd["round"],
                "graph": graph,
                "train_json": tj,
                "trained_at": at,
                "init": None if last else spec["chain"][i + 1]["round"],
                "init_sha256": None,  # filled below
                "init_onnx_as_recorded": args.get("init_onnx"),
                "train": {k: args[k] for k in TRAIN_KEYS if k in args},
                "train_seconds": tdoc.get("train_seconds"),
                "data": data,
                "validation": [{"data": v, "record": RECORDED.get(v)} for v in val],
            })
        for a, b in zip(chain, chain[1:]):
            a["init_sha256"] = b["graph"]["sha256"]
        head = chain[0]["graph"]["sha256"]
        src = spec["shipped_from"]
        stem = spec["name"]
        shipped = []
        for ext in PARTS:
            p = f"{src}/{stem}{ext}"
            if self.git.blob_id(self.base, p) is not None:
                f = self.file(p, self.base)
                shipped.append({"shipped_as": f"models/{spec['task']}/{stem}{ext}", **f})
        if shipped[0]["sha256"] != head:
            self.errors.append(f"{stem}: shipped graph {shipped[0]['sha256'][:8]} is not the chain's head {head[:8]}")
        return {"name": stem, "kind": "hop" if stem.endswith("-hop") else "stage_progress", "sha256": head,
                "shipped": shipped, "chain": chain, "notes": spec["notes"]}

    def datasets(self, rnd: str, train: list, at: str, checkpoints: dict) -> list:
        groups: dict = {}
        order = []
        for entry in train:
            if entry in RECORDED:
                groups[entry] = {"data": entry, "kind": "recorded", "record": RECORDED[entry]}
                order.append(entry)
                continue
            prefix, _, stem = entry.rpartition("/")
            if prefix not in LEARNER:
                self.errors.append(f"{rnd}: no source for dataset {entry}")
                continue
            dirs, cmd = LEARNER[prefix]
            recorded_as = stem
            if prefix in ALIAS:
                stem = re.sub(ALIAS[prefix], "", stem)
            hits = [d for d in dirs if self.git.blob_id(self.base, f"{d}/{stem}.toml")
                    or self.git.blob_id(at, f"{d}/{stem}.toml")]
            if len(hits) != 1:
                self.errors.append(f"{rnd}: {entry}: policy {stem}.toml found in {len(hits)} of {dirs}")
                continue
            if prefix not in groups:
                groups[prefix] = {"data": prefix, "kind": "learner_states", "record": cmd, "policy_dirs": dirs,
                                  "checkpoints": []}
                order.append(prefix)
            g = groups[prefix]
            for ext in (".onnx", ".toml"):
                f = self.file(f"{hits[0]}/{stem}{ext}", at)
                old = checkpoints.setdefault(f["path"], f)
                if old != f:
                    self.errors.append(f"{f['path']}: two versions in one lineage ({old['commit'][:12]}, "
                                       f"{f['commit'][:12]})")
            g["checkpoints"].append(f"{hits[0]}/{stem}" if len(dirs) > 1 else stem)
            if recorded_as != stem:
                g.setdefault("recorded_as", []).append(recorded_as)
        for g in groups.values():
            for k in ("checkpoints", "recorded_as"):
                if k in g:
                    g[k].sort(key=_natural)
        return [groups[k] for k in order]


def _natural(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def generate(git: Git) -> tuple:
    b = Build(git)
    out = {}
    for task in dict.fromkeys(m["task"] for m in MODELS):
        checkpoints: dict = {}
        models = [b.model(m, checkpoints) for m in MODELS if m["task"] == task]
        files = sorted(checkpoints.values(), key=lambda f: _natural(f["path"]))
        out[task] = {
            "schema": 1,
            "generated_by": "models/lineage.py (python3 models/lineage.py --check verifies this file against git)",
            "restore": "git show <commit>:<path> > FILE restores a file; every sha256 is of those bytes. A round's "
                       "dataset names its checkpoints by stem (policy_dir/STEM.onnx and STEM.toml, the policy "
                       "manifest); 'checkpoints' below lists each file once with its sha256 and commit. The record commands name "
                       "checkpoints by their paths at that commit: restore a directory first (git restore "
                       "--source=<commit> -- <dir>), and record with the simulator of the round's trained_at commit.",
            "base_commit": b.base,
            "task": task,
            "models": models,
            "checkpoints": files,
            "checkpoint_count": {"onnx": sum(f["path"].endswith(".onnx") for f in files),
                                 "manifest": sum(f["path"].endswith(".toml") for f in files)},
        }
    return out, b.errors


def dump(doc: dict) -> str:
    """JSON with the checkpoint table one file a line (it is most of the file)."""
    body = {k: v for k, v in doc.items() if k != "checkpoints"}
    text = json.dumps(body, indent=1)
    rows = ",\n".join("  " + json.dumps(f) for f in doc["checkpoints"])
    return text[:-2] + ',\n "checkpoints": [' + (f"\n{rows}\n ]" if rows else "]") + "\n}\n"


def check_shipped(doc: dict) -> list:
    """The working tree's models/<task>/ files must be the chain heads' bytes (graphs), each manifest's sha256
    fields must name them, and the task's MODEL_CARD.md must give every graph sha256 of the chain."""
    errs = []
    for m in doc["models"]:
        for f in m["shipped"]:
            p = REPO / f["shipped_as"]
            if not f["shipped_as"].endswith(".onnx"):
                continue
            if not p.exists():
                errs.append(f"{f['shipped_as']}: missing (lineage says {f['sha256'][:12]} from {f['path']})")
            elif sha256(p.read_bytes()) != f["sha256"]:
                errs.append(f"{f['shipped_as']}: sha256 {sha256(p.read_bytes())[:12]} is not the lineage's "
                            f"{f['sha256'][:12]} ({f['path']} at {f['commit'][:12]})")
        card = REPO / f"models/{doc['task']}/MODEL_CARD.md"
        if card.exists():
            text = card.read_text()
            for r in m["chain"]:
                if r["graph"]["sha256"] not in text:
                    errs.append(f"{card.relative_to(REPO)}: does not give {m['name']} {r['round']}'s graph sha256 "
                                f"{r['graph']['sha256']}")
        else:
            errs.append(f"{card.relative_to(REPO)}: missing")
        toml = REPO / f"models/{doc['task']}/{m['name']}.toml"
        if toml.exists():
            text = toml.read_text()
            for f in m["shipped"]:
                if f["shipped_as"].endswith(".onnx") and f'"{f["sha256"]}"' not in text:
                    errs.append(f"{toml.relative_to(REPO)}: does not name {f['shipped_as']}'s sha256 "
                                f"{f['sha256'][:12]}")
    return errs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="verify models/<task>/lineage.json against git and the shipped files; write nothing")
    ap.add_argument("--git-only", action="store_true",
                    help="with --check: skip the comparison with the working tree's shipped graphs")
    a = ap.parse_args()
    git = Git(REPO)
    try:
        git.full(BASE)
    except subprocess.CalledProcessError:
        print(f"lineage: commit {BASE} is not in this repository's history (a shallow clone?): "
              f"the checkpoints live there only; fetch the full history", file=sys.stderr)
        return 2
    docs, errors = generate(git)
    for e in errors:
        print(f"lineage: {e}", file=sys.stderr)
    if errors:
        return 1
    bad = 0
    for task, doc in docs.items():
        before = bad
        path = REPO / "models" / task / "lineage.json"
        if a.check:
            if not path.exists() or path.read_text() != dump(doc):
                print(f"lineage: {path.relative_to(REPO)} differs from what git holds (run models/lineage.py)",
                      file=sys.stderr)
                bad += 1
            if not a.git_only:
                for e in check_shipped(doc):
                    print(f"lineage: {e}", file=sys.stderr)
                    bad += 1
        else:
            path.write_text(dump(doc))
        n = doc["checkpoint_count"]
        print(f"{path.relative_to(REPO)}: {len(doc['models'])} model(s), "
              f"{sum(len(m['chain']) for m in doc['models'])} round(s), {n['onnx']} checkpoint ONNX + "
              f"{n['manifest']} manifests{(' ok' if bad == before else ' FAILED') if a.check else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
