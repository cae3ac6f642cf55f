"""Sweep state kept whole and consistent across a driver killed mid-copy (plain files, no Ray)."""
import json
import pickle

from iclr_ray.sweep.tuner import STATE_BACKUP, KeepLastGoodState, can_restore, repair_state

S1, S2 = "2026-12-01_05-00-00", "2026-12-01_06-00-00"


def _save(d, session, trials, generated):
    """One Tune save: the experiment state lists the trials, the searcher state (a pickle under a
    .json name, as Tune writes it) counts the trials it has generated."""
    d.mkdir(parents=True, exist_ok=True)
    (d / f"experiment_state-{session}.json").write_text(json.dumps({"trials": trials}))
    (d / f"basic-variant-state-{session}.json").write_bytes(pickle.dumps({"generated": generated}))


def _load(d, session):
    return (json.loads((d / f"experiment_state-{session}.json").read_text())["trials"],
            pickle.loads((d / f"basic-variant-state-{session}.json").read_bytes())["generated"])


def test_a_mixed_or_cut_off_copy_is_replaced_by_the_last_consistent_set(tmp_path):
    sweep, staging = tmp_path / "sweep", tmp_path / "staging"
    keep = KeepLastGoodState(sweep)
    _save(staging, S1, trials=2, generated=2)
    keep.snapshot(staging)
    _save(staging, S1, trials=3, generated=3)
    keep.snapshot(staging)
    assert len(list((sweep / STATE_BACKUP).iterdir())) == 2  # one set and the pointer to it

    # the copy into the sweep dir was cut between the two files: a searcher ahead of the trials
    _save(sweep, S1, trials=2, generated=3)
    (sweep / "tuner.pkl").write_bytes(b"pickled")
    assert repair_state(sweep) == {S1: "restored"}
    assert _load(sweep, S1) == (3, 3)
    assert repair_state(sweep) == {S1: "kept"}
    assert can_restore(sweep)

    (sweep / f"experiment_state-{S1}.json").write_text('{"trials": 3, "cu')  # cut mid-file
    assert not can_restore(sweep)
    assert repair_state(sweep) == {S1: "restored"} and _load(sweep, S1) == (3, 3)


def test_a_session_killed_before_its_first_copy_falls_back_to_the_one_before(tmp_path):
    sweep, staging = tmp_path / "sweep", tmp_path / "staging"
    KeepLastGoodState(sweep).snapshot(staging / "none")  # nothing staged yet: nothing kept
    _save(staging, S1, trials=4, generated=4)
    KeepLastGoodState(sweep).snapshot(staging)
    _save(sweep, S1, trials=4, generated=4)
    (sweep / f"experiment_state-{S2}.json").write_text("")  # the resumed driver died at once
    assert repair_state(sweep) == {S2: "removed", S1: "kept"}
    assert sorted(f.name for f in sweep.glob("experiment_state-*")) == [f"experiment_state-{S1}.json"]


def test_snapshot_skips_unchanged_and_cut_off_staging_files(tmp_path):
    sweep, staging = tmp_path / "sweep", tmp_path / "staging"
    keep = KeepLastGoodState(sweep)
    _save(staging, S1, trials=1, generated=1)
    keep.snapshot(staging)
    keep.snapshot(staging)
    assert (sweep / STATE_BACKUP / f"{S1}.current").read_text() == f"{S1}.1"
    (staging / f"basic-variant-state-{S1}.json").write_bytes(b"\x80\x04")  # a torn pickle
    keep.snapshot(staging)
    assert (sweep / STATE_BACKUP / f"{S1}.current").read_text() == f"{S1}.1"


def test_cannot_restore_without_a_complete_tuner(tmp_path):
    assert not can_restore(tmp_path)
    _save(tmp_path, S1, trials=1, generated=1)
    (tmp_path / "tuner.pkl").write_bytes(b"")
    assert not can_restore(tmp_path)
    (tmp_path / "tuner.pkl").write_bytes(b"pickled")
    assert can_restore(tmp_path)
