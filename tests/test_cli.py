"""The CLI and the run contract. Error paths run the real console script in a subprocess and must
exit 2 with one line before Ray starts; full runs use the session's Ray cluster in process."""
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from iclr_ray import cli

CLI = [sys.executable, "-m", "iclr_ray"]


def run_cli(*args, env=None, timeout=120):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args, message", [
    (["run", "no_such_study"], "unknown study 'no_such_study'"),
    (["run", "coord_sketch", "--set", "sparse.nn=3"], "unknown key 'sparse.nn'"),
    (["run", "coord_sketch", "--set", "seeds=many"], "'seeds': Input should be a valid integer"),
    (["run", "coord_sketch", "--set", "methods=[priority, magic]"], "'methods.1': Input should be"),
    (["run", "coord_sketch", "--config", "/nonexistent/c.yaml"], "cannot read config file"),
    (["run", "coord_sketch", "--set", "regression.features_csv=/nonexistent.csv",
      "--set", "regression.target_csv=/nonexistent.csv"], "'regression.features_csv': Path does not point to a file"),
    (["report", "/nonexistent/run"], "holds no result.json"),
])
def test_user_errors_exit_2_with_one_line_before_ray(tmp_path, args, message):
    start = time.monotonic()
    # RAY_ADDRESS pointing nowhere: if the CLI tried to reach Ray it would hang or fail differently
    extra = ["--out", str(tmp_path / "out")] if args[0] == "run" else []
    res = run_cli(*args, *extra, env={"RAY_ADDRESS": "127.0.0.1:1"})
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iclr-ray: error: ") and message in lines[0], res.stderr
    assert not (tmp_path / "out").exists()  # nothing written before the error
    assert time.monotonic() - start < 60


def test_bad_csv_exits_2_with_the_line_number(tmp_path):
    (tmp_path / "x.csv").write_text("key,a,b\nk1,1,2\nk2,3,oops\n")
    (tmp_path / "y.csv").write_text("key,y\nk1,1\n")
    res = run_cli("run", "coord_sketch", "--preset", "smoke", "--out", str(tmp_path / "out"),
                  "--set", f"regression.features_csv={tmp_path / 'x.csv'}",
                  "--set", f"regression.target_csv={tmp_path / 'y.csv'}", env={"RAY_ADDRESS": "127.0.0.1:1"})
    assert res.returncode == 2
    assert res.stderr.strip() == f"iclr-ray: error: {tmp_path / 'x.csv'}:3: column 'b' is not a finite number: 'oops'"


def test_list_shows_implemented_studies():
    res = run_cli("list")
    assert res.returncode == 0
    assert "coord_sketch" in res.stdout and "Daliri" in res.stdout and "ray: tasks" in res.stdout


def test_list_imports_no_study_module():
    code = ("import sys; from iclr_ray import cli; cli.main(['list']); "
            "print(sorted(m for m in sys.modules if m.startswith('iclr_ray.studies.')))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]" and "sphere_flow" in res.stdout


def test_a_study_whose_dependency_is_missing_lists_with_a_note_and_runs_exit_2(tmp_path):
    hide = "import sys; sys.modules['torch'] = None; from iclr_ray import cli; "  # as if torch were not installed
    res = subprocess.run([sys.executable, "-c", hide + "cli.main(['list'])"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    noted = {lines[i - 3].split()[0] for i, line in enumerate(lines) if "unavailable here: needs torch" in line}
    from iclr_ray.studies import REGISTRY

    needing = {e.id for e in REGISTRY.values() if "torch" in e.needs}
    assert {"arith_coupling", "sft_recipe", "policy_decorator", "orion"} <= needing
    assert noted == needing, res.stdout
    assert "pip install 'iclr-ray[llm]'" in res.stdout and "pip install 'iclr-ray[rl]'" in res.stdout
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-c", hide + f"raise SystemExit(cli.main(['run', 'arith_coupling', "
                          f"'--preset', 'smoke', '--out', '{out}']))"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "RAY_ADDRESS": "127.0.0.1:1"})
    assert res.returncode == 2 and res.stderr.strip() == (
        "iclr-ray: error: study 'arith_coupling' needs torch; install it with: pip install 'iclr-ray[llm]'")
    assert not out.exists()


def test_doctor_reports_packages_and_hardware():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    res = subprocess.run([*CLI, "doctor"], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0
    assert "ray " in res.stdout and "GPU: no" in res.stdout and "embedded local Ray" in res.stdout


def test_doctor_says_when_ray_is_unreachable():
    res = run_cli("doctor", "--address", "127.0.0.1:1", timeout=180)
    assert res.returncode == 1 and "cannot reach Ray at 127.0.0.1:1" in res.stdout


def test_run_against_an_unreachable_cluster_exits_2_before_writing(tmp_path):
    res = run_cli("run", "coord_sketch", "--preset", "smoke", "--out", str(tmp_path / "out"),
                  "--address", "127.0.0.1:1")
    assert res.returncode == 2 and "cannot reach Ray at 127.0.0.1:1" in res.stderr
    assert not (tmp_path / "out").exists()


def test_doctor_reaches_the_cluster(ray_cluster):
    res = run_cli("doctor", "--address", ray_cluster.gcs_address, timeout=180)
    assert res.returncode == 0 and "ray: reached" in res.stdout and "2 CPUs" in res.stdout


@pytest.fixture(scope="module")
def smoke_run(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "smoke"
    assert cli.main(["run", "coord_sketch", "--preset", "smoke", "--out", str(out), "--set", "seed=3"]) == 0
    return out


def test_smoke_run_writes_the_whole_run_directory(smoke_run):
    files = {p.name for p in smoke_run.iterdir()}
    assert {"config.yaml", "metrics.jsonl", "result.json", "report.md", "plots"} <= files
    assert not [p for p in smoke_run.rglob("*.tmp")]
    result = json.loads((smoke_run / "result.json").read_text())
    assert set(result) >= {"study", "preset", "config", "metrics", "claims", "env", "seconds"}
    assert result["study"] == "coord_sketch" and result["preset"] == "smoke" and result["config"]["seed"] == 3
    assert result["env"]["cluster_cpus"] == 2
    for claim in result["claims"]:
        assert set(claim) >= {"id", "statement", "measured", "bound", "holds"}
        assert set(claim) >= {"ci", "n"} and claim["holds"] in (True, False, None)  # None: inconclusive
    metrics = [json.loads(line) for line in (smoke_run / "metrics.jsonl").read_text().splitlines()]
    cfg = result["config"]
    per_sweep = len(cfg["methods"]) * len(cfg["sketch_rows"]) * cfg["seeds"]
    assert len(metrics) == 6 * per_sweep + len(cfg["methods"]) * cfg["unbiased"]["seeds"]
    plots = sorted(p.name for p in (smoke_run / "plots").iterdir())
    assert plots == ["error_vs_storage_other.png", "error_vs_storage_sparse.png", "regression.png",
                     "unbiasedness.png"]
    assert all((smoke_run / "plots" / p).read_bytes()[:4] == b"\x89PNG" for p in plots)
    report = (smoke_run / "report.md").read_text()
    assert "| `sparse_advantage` |" in report and "![error_vs_storage_sparse]" in report


def test_config_yaml_reruns_the_same_config(smoke_run):
    from iclr_ray.config import resolve
    from iclr_ray.studies import get

    study = get("coord_sketch")
    cfg = resolve(study.config, study.presets, "small", file=smoke_run / "config.yaml")
    assert cfg.model_dump(mode="json") == json.loads((smoke_run / "result.json").read_text())["config"]


def test_report_rerenders_from_result(smoke_run, capsys):
    before = (smoke_run / "report.md").read_text()
    (smoke_run / "report.md").unlink()
    assert cli.main(["report", str(smoke_run)]) == 0
    assert (smoke_run / "report.md").read_text() == before
    assert "claims held" in capsys.readouterr().out


def test_finished_run_directory_is_not_overwritten(smoke_run, capsys):
    assert cli.main(["run", "coord_sketch", "--preset", "smoke", "--out", str(smoke_run)]) == 2
    assert "already holds a finished run" in capsys.readouterr().err


def test_real_tables_from_csv(ray_cluster, tmp_path):
    """Two CSV tables joined on a string key go through prepare -> Ray -> report."""
    import numpy as np

    rng = np.random.default_rng(0)
    keys = [f"id-{i:05d}" for i in range(3000)]
    X = rng.standard_normal((3000, 3))
    y = 1.0 + X @ np.array([2.0, -1.0, 0.5]) + 0.1 * rng.standard_normal(3000)
    with open(tmp_path / "x.csv", "w") as f:
        f.write("id,f1,f2,f3\n" + "".join(f"{k},{a},{b},{c}\n" for k, (a, b, c) in zip(keys[:2000], X[:2000])))
    with open(tmp_path / "y.csv", "w") as f:
        f.write("id,target\n" + "".join(f"{k},{v}\n" for k, v in zip(keys[1000:], y[1000:])))
    out = tmp_path / "run"
    code = cli.main(["run", "coord_sketch", "--preset", "smoke", "--out", str(out),
                     "--set", "methods=[priority, jl]", "--set", "sketch_rows=[4]", "--set", "seeds=2",
                     "--set", f"regression.features_csv={tmp_path / 'x.csv'}",
                     "--set", f"regression.target_csv={tmp_path / 'y.csv'}",
                     "--set", "regression.key=id", "--set", "regression.target=target"])
    assert code == 0
    reg = json.loads((out / "result.json").read_text())["metrics"]["regression"]
    assert reg["source"] == "csv" and reg["join_rows"] == 1000 and reg["keys_x"] == 2000
    assert reg["r2_exact"] > 0.99
    assert yaml.safe_load((out / "config.yaml").read_text())["regression"]["key"] == "id"


def _space(tmp_path, params: str):
    path = tmp_path / "space.yaml"
    path.write_text(f"metric: score\nmode: max\nparams:\n{params}")
    return str(path)


@pytest.mark.parametrize("make_args, message", [
    (lambda t: ["sweep", "coord_sketch", "--space", _space(t, "  seeds: {grid: [1, 2]}\n")],
     "study 'coord_sketch' has no sweep"),
    (lambda t: ["sweep", "sft_recipe", "--space", str(t / "missing.yaml")], "missing.yaml"),
    (lambda t: ["sweep", "sft_recipe", "--space", _space(t, "  sft.lrr: {grid: [0.1]}\n")], "unknown key 'sft.lrr'"),
    (lambda t: ["sweep", "sft_recipe", "--space", _space(t, "  data.seq_len: {grid: [64, 128]}\n")],
     "data.seq_len cannot vary between trials"),
    (lambda t: ["sweep", "sft_recipe", "--space", _space(t, "  sft.lr: {loguniform: [0.1, 0.01]}\n")],
     "low < high"),
    (lambda t: ["sweep", "sft_recipe", "--space", _space(t, "  sft.lr: {grid: [0.1]}\n"), "--resume", str(t / "no")],
     "no config.yaml there"),
    (lambda t: ["run", "sft_recipe", "--set", "sft.num_workers=3"], "does not split over 3 workers"),
    (lambda t: ["run", "sft_recipe", "--set", "sft.sample_budget=16"], "exceeds sft.sample_budget=16"),
    (lambda t: ["run", "sft_recipe", "--set", f"sft.model={t}"], "is not a model checkpoint"),
    (lambda t: ["run", "sft_recipe", "--set", f"data.knowledge_jsonl={_chat(t, 'k.jsonl', 3)}"],
     "give both knowledge_jsonl and skills_jsonl"),
    (lambda t: ["run", "sft_recipe", "--set", f"data.knowledge_jsonl={_chat(t, 'k.jsonl', 3, bad_line=2)}",
                "--set", f"data.skills_jsonl={_chat(t, 's.jsonl', 3)}"], "k.jsonl:2: not valid JSON"),
    (lambda t: ["run", "sft_recipe", "--set", f"data.knowledge_jsonl={_chat(t, 'k.jsonl', 3)}",
                "--set", f"data.skills_jsonl={_chat(t, 's.jsonl', 3)}"], "need more than data.n_eval=120"),
])
def test_sft_recipe_and_sweep_errors_exit_2_before_ray(tmp_path, make_args, message):
    args = make_args(tmp_path)
    res = run_cli(*args, "--out", str(tmp_path / "out"), env={"RAY_ADDRESS": "127.0.0.1:1"})
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iclr-ray: error: ") and message in lines[0], res.stderr
    assert not (tmp_path / "out").exists()


def _chat(tmp_path, name: str, n: int, bad_line: int | None = None) -> str:
    lines = [json.dumps({"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]})
             for i in range(n)]
    if bad_line:
        lines[bad_line - 1] = '{"messages": ['
    (tmp_path / name).write_text("\n".join(lines) + "\n")
    return str(tmp_path / name)


def test_unknown_model_name_exits_2_before_ray(tmp_path):
    res = run_cli("run", "sft_recipe", "--set", "sft.model=nope-llama", "--out", str(tmp_path / "out"),
                  env={"RAY_ADDRESS": "127.0.0.1:1", "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 2 and "neither a named tiny model" in res.stderr and len(res.stderr.splitlines()) == 1
    assert not (tmp_path / "out").exists()
