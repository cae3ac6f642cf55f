"""clusters/: validated offline, the way `ray up` checks a config before contacting any cloud.

`ray up` (ray.autoscaler._private.commands._bootstrap_config) runs ``prepare_config`` (merge the
provider's defaults.yaml, merge setup commands, fill per-node-type min/max workers; for the local
provider first ``prepare_local``), asks the cloud to fill in missing node resources (skipped here:
network), then ``validate_config`` (ray-schema.json plus cross-field checks). The assertions below
run on that prepared config, so anything Ray's defaults would add (its own setup and start commands
when ours are missing) is checked too. No network, no ssh, no `ray up`.
"""
from __future__ import annotations

import copy
import re
import shlex
import tomllib
from pathlib import Path

import click
import jsonschema
import pytest
import ray
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.runtime_env import RuntimeEnv

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ROOT / "clusters"
LAUNCHER_CONFIGS = ["cpu.yaml", "gpu.yaml", "onprem.yaml"]
DASHBOARD_PORT = 8265
PUBLIC_CIDRS = {"0.0.0.0/0", "::/0"}


def load(name: str) -> dict:
    return yaml.safe_load((CLUSTERS / name).read_text())


def ray_up_validate(cfg: dict) -> dict:
    """The offline part of `ray up`'s _bootstrap_config; returns the prepared config or raises."""
    prepared = prepare_config(copy.deepcopy(cfg))
    validate_config(prepared)
    return prepared


def prepared(name: str) -> dict:
    return ray_up_validate(load(name))


def pyproject_ray_pin() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (ray_req,) = [Requirement(d) for d in deps if Requirement(d).name == "ray"]
    (spec,) = ray_req.specifier
    assert spec.operator == "==", f"pyproject should pin ray exactly, has {ray_req}"
    return spec.version


def pip_installs(commands: list[str]) -> list[list[str]]:
    """The arguments of every `pip install` in a list of shell command lines."""
    found = []
    for command in commands:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        segment: list[str] = []
        for word in [*lexer, ";"]:
            if word in {";", "&&", "||", "|", "&"}:
                if segment[:2] == ["pip", "install"]:
                    found.append(segment[2:])
                segment = []
            else:
                segment.append(word)
    return found


def requirements_in(commands: list[str]) -> list[Requirement]:
    """Every pip install argument that parses as a requirement (paths, URLs and flags do not)."""
    reqs = []
    for args in pip_installs(commands):
        for arg in args:
            try:
                reqs.append(Requirement(arg))
            except InvalidRequirement:
                pass
    return reqs


def dashboard_exposures(cfg: dict) -> list[str]:
    """What in a prepared launcher config would make the dashboard reachable beyond the head."""
    problems = []
    for command in cfg["head_start_ray_commands"]:
        if "ray start" in command:
            hosts = re.findall(r"--dashboard-host[= ](\S+)", command)
            if hosts != ["127.0.0.1"]:
                problems.append(f"head start command binds the dashboard to {hosts}: {command}")
    for rule in cfg["provider"].get("security_group", {}).get("IpPermissions", []):
        cidrs = {r.get("CidrIp") for r in rule.get("IpRanges", [])}
        cidrs |= {r.get("CidrIpv6") for r in rule.get("Ipv6Ranges", [])}
        all_ports = str(rule.get("IpProtocol")) == "-1"
        covers = all_ports or rule.get("FromPort", 0) <= DASHBOARD_PORT <= rule.get("ToPort", -1)
        if covers and cidrs & PUBLIC_CIDRS:
            problems.append(f"security group rule opens {DASHBOARD_PORT} to the world: {rule}")
    return problems


@pytest.fixture(scope="module", params=LAUNCHER_CONFIGS)
def launcher(request) -> tuple[str, dict]:
    """(file name, config as `ray up` prepares and validates it)."""
    return request.param, prepared(request.param)


def test_validator_is_the_pinned_ray():
    # The schema these tests validate against is the installed Ray's; it must be the deployed one.
    assert ray.__version__ == pyproject_ray_pin()


def test_ray_validation_accepts_config(launcher):
    name, cfg = launcher
    assert cfg["cluster_name"].startswith("iclr-ray")
    assert cfg["head_node_type"] in cfg["available_node_types"]


@pytest.mark.parametrize(
    "name, break_it, error",
    [
        ("gpu.yaml", lambda c: c.update(dashboard_port=8265), jsonschema.ValidationError),
        ("cpu.yaml", lambda c: c["available_node_types"]["cpu_32"].pop("resources"),
         jsonschema.ValidationError),
        ("gpu.yaml", lambda c: c.update(head_node_type="gpu_16x"), ValueError),
        ("gpu.yaml", lambda c: c["available_node_types"]["gpu_4x_a10g"].update(min_workers=7),
         ValueError),
        ("onprem.yaml", lambda c: c.update(available_node_types={"gpu": {"node_config": {}}}),
         click.ClickException),
        ("onprem.yaml", lambda c: c["provider"].pop("worker_ips"), click.ClickException),
    ],
    ids=["unknown-top-level-key", "node-type-without-resources", "head-type-not-defined",
         "min-workers-above-max-workers", "onprem-node-types", "onprem-without-worker-ips"],
)
def test_ray_validation_rejects_broken_copy(name, break_it, error):
    cfg = load(name)
    break_it(cfg)
    with pytest.raises(error):
        ray_up_validate(cfg)


def test_setup_installs_project_with_pinned_ray(launcher):
    name, cfg = launcher
    (target,) = cfg["file_mounts"]  # the checkout, copied from the repository root
    assert cfg["file_mounts"][target] == "."
    target = target.replace("~", "$HOME", 1)
    pin = pyproject_ray_pin()
    # After prepare_config, setup_commands are merged into both lists: check each kind of node.
    for commands in (cfg["head_setup_commands"], cfg["worker_setup_commands"]):
        editable = [a for args in pip_installs(commands) for a in zip(args, args[1:])]
        assert ("-e", f"{target}[all]") in editable, f"{name}: no pip install -e {target}[all]"
        ray_pins = [str(r.specifier) for r in requirements_in(commands) if r.name == "ray"]
        assert ray_pins and set(ray_pins) == {f"=={pin}"}, f"{name}: ray pins {ray_pins} != {pin}"
    if cfg["provider"]["type"] == "aws":  # the autoscaler on the head needs boto3
        assert "boto3" in {r.name for r in requirements_in(cfg["head_setup_commands"])}


def test_gpu_cluster_brings_its_own_torch():
    cfg = prepared("gpu.yaml")
    setup = cfg["head_setup_commands"] + cfg["worker_setup_commands"]
    assert "torch" not in {r.name for r in requirements_in(setup)}  # the AMI's CUDA build
    assert not [c for c in setup if "constraints/cpu.txt" in c or "whl/cpu" in c]


def test_cpu_cluster_installs_cpu_torch():
    cfg = prepared("cpu.yaml")
    torch_installs = [
        args for args in pip_installs(cfg["worker_setup_commands"]) if "torch" in args
    ]
    assert torch_installs
    assert all(
        ("--index-url", "https://download.pytorch.org/whl/cpu") in zip(args, args[1:])
        for args in torch_installs
    )


def test_dashboard_stays_on_head_loopback(launcher):
    name, cfg = launcher
    assert dashboard_exposures(cfg) == []


@pytest.mark.parametrize(
    "break_it",
    [
        # Without our own start commands, Ray's AWS defaults (--dashboard-host=0.0.0.0) apply.
        lambda c: c.pop("head_start_ray_commands"),
        lambda c: c["head_start_ray_commands"].__setitem__(
            1, c["head_start_ray_commands"][1].replace("127.0.0.1", "0.0.0.0")),
        lambda c: c["provider"].update(security_group={"IpPermissions": [
            {"IpProtocol": "tcp", "FromPort": 8000, "ToPort": 9000,
             "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]}),
    ],
    ids=["ray-default-start-commands", "dashboard-host-0.0.0.0", "security-group-8265"],
)
def test_dashboard_check_catches_exposure(break_it):
    cfg = load("gpu.yaml")
    break_it(cfg)
    assert dashboard_exposures(ray_up_validate(cfg))


def test_gpu_cluster_autoscales_gpu_workers():
    cfg = prepared("gpu.yaml")
    types = cfg["available_node_types"]
    assert "GPU" not in types[cfg["head_node_type"]]["resources"]
    gpu_types = [t for t in types.values() if t["resources"].get("GPU", 0) > 0]
    assert gpu_types
    assert all(t["min_workers"] == 0 and t["max_workers"] > 0 for t in gpu_types)
    assert cfg["idle_timeout_minutes"] > 0


# KubeRay RayJob: Ray has no validator for the CR, so check its structure; its runtime env is
# validated by Ray's RuntimeEnv (the same parsing `ray job submit` applies).


@pytest.fixture(scope="module")
def rayjob() -> dict:
    return load("kuberay/rayjob.yaml")


def pod_specs(spec: dict) -> list[dict]:
    cluster = spec["rayClusterSpec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [g["template"]["spec"] for g in groups]


def test_rayjob_runs_a_study_and_shuts_down(rayjob):
    assert rayjob["apiVersion"] == "ray.io/v1" and rayjob["kind"] == "RayJob"
    spec = rayjob["spec"]
    assert shlex.split(spec["entrypoint"])[:2] == ["iclr-ray", "run"]
    assert spec["shutdownAfterJobFinishes"] is True


def test_rayjob_runtime_env_installs_project(rayjob):
    env = RuntimeEnv(**yaml.safe_load(rayjob["spec"]["runtimeEnvYAML"]))
    (project,) = [r for r in map(Requirement, env.pip_config()["packages"]) if r.name == "iclr-ray"]
    assert project.url == env.working_dir()  # the package and the working dir: one archive


def test_rayjob_images_match_ray_pin(rayjob):
    pin = pyproject_ray_pin()
    assert rayjob["spec"]["rayClusterSpec"]["rayVersion"] == pin
    pods = pod_specs(rayjob["spec"])
    assert len(pods) >= 2 and all(pod["containers"] for pod in pods)
    for pod in pods:
        for container in pod["containers"]:
            repo, tag = container["image"].rsplit(":", 1)
            assert repo == "rayproject/ray" and tag.split("-")[0] == pin, container["image"]


def test_rayjob_worker_group_has_gpus(rayjob):
    (worker_group,) = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    limits = [c["resources"]["limits"] for c in worker_group["template"]["spec"]["containers"]]
    assert any(int(lim.get("nvidia.com/gpu", 0)) > 0 for lim in limits)
    assert worker_group["minReplicas"] == 0 < worker_group["maxReplicas"]


def test_rayjob_head_service_not_public(rayjob):
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head.get("serviceType", "ClusterIP") == "ClusterIP"
