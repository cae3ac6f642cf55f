"""Saved base policies and demonstrations: the file formats of the residual-RL studies.

A base policy directory holds ``policy.safetensors`` (the state dict) and ``policy.json`` (kind
and hyperparameters), each written whole (:mod:`iclr_ray.llm.weights`); it is a location (:mod:`iclr_ray.storage`: a local
path, or a URI such as ``s3://...`` in a run's storage, which every node of a cluster reads).
Demonstrations are an ``.npz`` of concatenated episodes (obs, actions, episode start offsets,
seeds, success), saved at a location too; :func:`load_demos` reads local files: our ``.npz``,
ManiSkill's trajectory HDF5 (``traj_<i>/obs``, ``traj_<i>/actions`` with the seeds in the JSON
next to it) and Minari datasets (``minari.load_dataset`` by id or path).
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import storage
from ..config import DataError

POLICY_FILE, POLICY_META = "policy.safetensors", "policy.json"  # the weights and, beside them, kind and hparams


def save_policy(policy, directory: str | Path) -> str:
    """``policy`` saved in the folder ``directory`` (a path or a URI); returns its location."""
    from ..llm.weights import save_weights

    d = storage.normalise(directory)
    save_weights(policy.state_dict(), storage.join(d, POLICY_FILE), {"kind": policy.kind, "hparams": policy.hparams()})
    return d


def load_policy(directory: str | Path):
    """The frozen policy saved in ``directory`` (a path or a URI; eval mode, one torch thread is
    the caller's job)."""
    from ..llm.weights import load_weights
    from .base_policies import build

    d = storage.normalise(directory)
    try:
        meta = json.loads(storage.read_text(storage.join(d, POLICY_META)))
        state = load_weights(storage.join(d, POLICY_FILE))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"no saved base policy in {d} ({exc})") from None
    policy = build(meta["kind"], **meta["hparams"])
    policy.load_state_dict(state)
    policy.eval()
    for p in policy.parameters():
        p.requires_grad_(False)
    return policy


@dataclass
class Demos:
    obs: np.ndarray
    """(N, obs_dim) all steps of all episodes"""
    actions: np.ndarray
    """(N, act_dim) in [-1, 1]"""
    starts: np.ndarray
    """(E + 1,) episode e is rows starts[e]:starts[e+1]"""
    seeds: np.ndarray
    """(E,) the reset seed of each episode"""
    success: np.ndarray
    """(E,) whether each episode succeeded"""

    def episodes(self):
        for e in range(len(self.seeds)):
            a, b = self.starts[e], self.starts[e + 1]
            yield self.obs[a:b], self.actions[a:b]

    @classmethod
    def from_episodes(cls, episodes: list[tuple[np.ndarray, np.ndarray]], seeds, success) -> "Demos":
        starts = np.concatenate([[0], np.cumsum([len(a) for _, a in episodes])]).astype(np.int64)
        return cls(np.concatenate([o[: len(a)] for o, a in episodes]).astype(np.float32),
                   np.concatenate([a for _, a in episodes]).astype(np.float32), starts,
                   np.asarray(seeds, dtype=np.int64), np.asarray(success, dtype=bool))


def save_demos(demos: Demos, path: str | Path) -> str:
    """``demos`` as one ``.npz`` at ``path`` (a path or a URI), written whole; returns its location."""
    buf = io.BytesIO()
    np.savez(buf, obs=demos.obs, actions=demos.actions, starts=demos.starts, seeds=demos.seeds, success=demos.success)
    location = storage.normalise(path)
    storage.write_bytes(location, buf.getvalue())
    return location


def load_demos(path: str | Path) -> Demos:
    """Demonstrations from our .npz, a ManiSkill trajectory .h5 or a Minari dataset (``minari:<id>``)."""
    p = str(path)
    if p.startswith("minari:"):
        return _load_minari(p[len("minari:"):])
    path = Path(p)
    if not path.is_file():
        raise DataError(f"demonstrations file not found: {path}")
    if path.suffix == ".npz":
        try:
            z = np.load(path)
            return Demos(z["obs"], z["actions"], z["starts"], z["seeds"], z["success"])
        except (KeyError, ValueError, OSError) as exc:
            raise DataError(f"{path}: not a demonstrations .npz ({exc})") from None
    if path.suffix in (".h5", ".hdf5"):
        return _load_maniskill_h5(path)
    raise DataError(f"{path}: unknown demonstrations format (want .npz, .h5 or minari:<id>)")


def _load_maniskill_h5(path: Path) -> Demos:
    try:
        import h5py
    except ImportError:
        raise DataError("reading ManiSkill .h5 demonstrations needs h5py") from None
    meta_path = path.with_suffix(".json")
    seeds: dict[int, int] = {}
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        seeds = {int(e["episode_id"]): int(e.get("episode_seed", e.get("reset_kwargs", {}).get("seed", -1)))
                 for e in meta.get("episodes", [])}
    episodes, ids, success = [], [], []
    with h5py.File(path, "r") as f:
        keys = sorted((k for k in f if k.startswith("traj_")), key=lambda k: int(k.split("_")[1]))
        if not keys:
            raise DataError(f"{path}: no traj_<i> groups")
        for k in keys:
            g = f[k]
            if not isinstance(g["obs"], h5py.Dataset):
                raise DataError(f"{path}:{k}/obs is not a flat state array; replay it with obs_mode=state first")
            obs, act = np.asarray(g["obs"]), np.asarray(g["actions"])
            episodes.append((obs, act))
            ids.append(int(k.split("_")[1]))
            success.append(bool(np.asarray(g["success"])[-1]) if "success" in g else True)
    return Demos.from_episodes(episodes, [seeds.get(i, -1) for i in ids], success)


def _load_minari(dataset_id: str) -> Demos:
    """A Minari dataset by id (looked up under ``MINARI_DATASETS_PATH``, by default
    ``~/.minari/datasets``; ``minari download <id>`` puts it there). Each episode's reset seed
    comes from the dataset's episode metadata (the episode id where none was recorded); an episode
    succeeded if its ``success`` info was true at any step (else if it terminated)."""
    try:
        import minari
    except ImportError:
        raise DataError("reading Minari demonstrations needs the minari package (pip install minari)") from None
    try:
        ds = minari.load_dataset(dataset_id)
    except Exception as exc:  # noqa: BLE001 (minari raises several kinds for a missing data set)
        raise DataError(f"Minari dataset {dataset_id!r} cannot be loaded here ({exc})") from None
    episodes, ids, success = [], [], []
    for ep in ds.iterate_episodes():
        episodes.append((np.asarray(ep.observations), np.asarray(ep.actions)))
        ids.append(int(ep.id))
        infos = ep.infos if isinstance(ep.infos, dict) else {}
        success.append(bool(np.any(infos["success"] if "success" in infos else ep.terminations)))
    meta = list(ds.storage.get_episode_metadata(ids))
    seeds = [int(m["seed"]) if m.get("seed") is not None else i for i, m in zip(ids, meta)]
    return Demos.from_episodes(episodes, seeds, success)
