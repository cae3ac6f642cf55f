"""igcg's inputs: the targets file (CSV in the benchmark's goal,target layout, or JSONL) with errors
naming file and line, and the config's own checks."""
import pytest

from iclr_ray.config import ConfigError, DataError, resolve
from iclr_ray.studies.igcg.config import PRESETS, Config
from iclr_ray.studies.igcg.data import all_texts, read_targets
from iclr_ray.studies.igcg.run import grid, label


def test_reads_csv_and_jsonl_targets(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text('goal,target\n"Name a fruit, please",The answer is pear.\nSay a colour,The answer is red.\n'
                   "Say a number,The answer is two.\n")
    rows = read_targets(csv)
    assert [(r.message, r.target) for r in rows][0] == ("Name a fruit, please", "The answer is pear.")
    assert len(read_targets(csv, limit=2)) == 2
    js = tmp_path / "t.jsonl"
    js.write_text('{"message": "Say hi", "target": "ok"}\n\n{"message": "Say bye", "target": "fine"}\n')
    assert [r.target for r in read_targets(js)] == ["ok", "fine"]
    assert all_texts(read_targets(js)) == ["Say hi", "Say bye", "ok", "fine"]


def test_bad_targets_files_name_the_place(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_targets(tmp_path / "missing.csv")
    bad = tmp_path / "h.csv"
    bad.write_text("prompt,answer\na,b\n")
    with pytest.raises(DataError, match=r"h.csv:1: the header lacks goal, target"):
        read_targets(bad)
    empty = tmp_path / "e.csv"
    empty.write_text("goal,target\na,b\nc,\n")
    with pytest.raises(DataError, match=r"e.csv:3: missing or empty target"):
        read_targets(empty)
    js = tmp_path / "b.jsonl"
    js.write_text('{"message": "a", "target": "b"}\n{"message": "", "target": "b"}\n')
    with pytest.raises(DataError, match=r"b.jsonl:2: missing or empty message"):
        read_targets(js)
    one = tmp_path / "one.jsonl"
    one.write_text('{"message": "a", "target": "b"}\n')
    with pytest.raises(DataError, match="at least two rows"):
        read_targets(one)


def test_config_checks():
    with pytest.raises(ConfigError, match="ks must hold 1"):
        resolve(Config, PRESETS, "smoke", sets=["ks=[3,7]"])
    with pytest.raises(ConfigError, match="easy=5 but there are 2 targets"):
        resolve(Config, PRESETS, "smoke", sets=["easy=5"])
    with pytest.raises(ConfigError, match="criterion"):
        resolve(Config, PRESETS, "smoke", sets=["attack.criterion=close"])
    with pytest.raises(ConfigError, match="lists a value twice"):
        resolve(Config, PRESETS, "smoke", sets=["seeds=[0,0]"])


def test_grid_runs_every_method_on_every_target_and_seed():
    cfg = Config(ks=[1, 3], seeds=[0, 1], attack={"K": 7})
    main, e2h = grid(cfg, 4)
    # K = 7 joins ks: the control and easy-to-hard are compared with its runs
    assert {(s["method"], s["K"]) for s in main} == {("gcg", 1), ("igcg", 3), ("igcg", 7), ("random", 7)}
    assert len(main) == 4 * 4 * 2 and len({label(s) for s in main + e2h}) == len(main) + len(e2h)
    assert sorted({s["target"] for s in e2h}) == [1, 2, 3] and all(s["K"] == 7 and s["init"] == "easy" for s in e2h)
    main, e2h = grid(Config(control=False, easy_to_hard=False, ks=[1, 3], attack={"K": 7}), 4)
    assert {s["K"] for s in main} == {1, 3} and e2h == []


def test_shipped_search_spaces_fit_the_config():
    from pathlib import Path

    from iclr_ray.sweep.spaces import load_space

    root = Path(__file__).resolve().parents[2] / "tune_spaces"
    small = load_space(root / "igcg_small.yaml", Config)
    assert set(small.params) == {"attack.K", "attack.top_k", "attack.batch"} and small.metric == "seconds"
    assert set(load_space(root / "igcg_smoke.yaml", Config).params) == {"attack.K"}
