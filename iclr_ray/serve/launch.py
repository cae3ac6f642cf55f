"""Starting the serving apps: from ``iclr-ray serve`` (embedded Ray or a cluster) and from tests.

Everything the user gives is checked before Ray starts: the app's args (a generation model that
is neither a checkpoint, a run directory holding one, nor an HF id is a one-line ConfigError) and
the Serve config file (read with Ray's own ``ServeDeploySchema``, as ``serve run`` reads it).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .. import log as logs
from ..config import ConfigError, load_yaml_file

log = logs.get(__name__)

BUILDERS = {"generate": "iclr_ray.serve.app:generation_app", "embed": "iclr_ray.serve.app:embedding_app",
            "pad": "iclr_ray.serve.app:pad_app", "judge": "iclr_ray.serve.app:judge_app",
            "recommend": "iclr_ray.serve.app:recommend_app"}

DEFAULT_GENERATION_MODEL = "smollm2-135m-instruct"
"""what ``serve generate`` serves without ``--model``: SmolLM2-135M-Instruct, a packaged model
(llm/pretrained.py) that installs from PyPI and loads offline, with its own chat template"""


def load_serve_config(app: str, path: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the args of application ``app``, http options) from a Serve config YAML; ({}, {}) without one."""
    if path is None:
        return {}, {}
    from pydantic import ValidationError
    from ray.serve.schema import ServeDeploySchema

    raw = load_yaml_file(path)
    try:
        schema = ServeDeploySchema.model_validate(raw) if hasattr(ServeDeploySchema, "model_validate") \
            else ServeDeploySchema.parse_obj(raw)
    except (ValidationError, ValueError, TypeError) as exc:
        first = str(exc).splitlines()
        raise ConfigError(f"{path}: not a Serve config: {' '.join(first[:3])}") from None
    for a in schema.applications:
        if a.import_path == BUILDERS[app] or a.name == app:
            http = {}
            if schema.http_options is not None:
                http = {"host": schema.http_options.host, "port": schema.http_options.port}
            return dict(a.args or {}), http
    raise ConfigError(f"{path}: no application named {app!r} or importing {BUILDERS[app]}")


def default_model(app: str, model: str | None) -> str | None:
    """``model``, or for ``generate``, ``pad`` and ``judge`` without one the packaged SmolLM2-135M-Instruct."""
    return model or (DEFAULT_GENERATION_MODEL if app in ("generate", "pad", "judge") else None)


def check_model(app: str, model: str | None, flag: str = "--model") -> None:
    if model is None:
        return
    from ..llm import pretrained

    if model in pretrained.PACKAGED:
        pretrained.check_available(model)  # the wheel is installed (else one line naming pip)
        return
    path = Path(model).expanduser()
    if path.exists() or model.startswith((".", "/", "~")):
        if not path.is_dir():
            raise ConfigError(f"{flag} {model}: no such directory")
        from .app import _resolve_model_dir

        if not (Path(_resolve_model_dir(str(path))) / "config.json").is_file():
            raise ConfigError(f"{flag} {model}: no model checkpoint there (no config.json, no */checkpoint_*/model)")


def check_placement(args: dict[str, Any]) -> None:
    """An app's ``device`` and ``dtype``, checked here (the GPU itself is the replica's, not this
    machine's: ``cuda`` is checked where the replica starts)."""
    from .app import DTYPES

    device, dtype = str(args.get("device", "auto")), str(args.get("dtype", "auto"))
    if not (device in ("auto", "cpu") or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ConfigError(f"--device {device}: one of auto, cpu, cuda, cuda:N")
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype {dtype}: one of {', '.join(DTYPES)}")


def check_app_args(app: str, args: dict[str, Any]) -> None:
    """Every model an app loads, checked before Ray starts (one line, exit 2)."""
    check_placement(args)
    if app == "recommend":
        if not args.get("model"):
            raise ConfigError("serve recommend needs --model: an alpharec run's bundle "
                              "(artefacts/*/alpharec_bundle.pt; report.md names them), or its folder")
        from .app import resolve_bundle

        try:
            resolve_bundle(args["model"])
        except ValueError as exc:
            raise ConfigError(f"--model {exc}") from None
        return
    check_model(app, args.get("model"))
    if app == "pad":
        if not args.get("prm"):
            raise ConfigError("serve pad needs --prm: the personalised reward model (a pad run's "
                              "tune/prm/*/train/checkpoint_*/model, or a folder holding one)")
        check_model(app, args["prm"], "--prm")
        if args.get("base_reads", "preference") not in ("preference", "plain"):
            raise ConfigError(f"base_reads: 'preference' (the official setup) or 'plain', got {args['base_reads']!r}")
        path = Path(args["prm"]).expanduser()
        if path.is_dir() and not (path / "config.json").is_file():
            found = list(path.rglob("checkpoint_*/model/config.json"))
            if len(found) > 1:  # a pad run holds the real PRMs and their shuffled controls: never guess
                raise ConfigError(f"--prm {args['prm']}: holds {len(found)} model checkpoints; give the one to serve "
                                  "(report.md of a pad run names its PRMs)")
    if app == "judge":
        judges = args.get("judges") or {}
        if not judges:
            raise ConfigError("serve judge needs --judge NAME=FILE: a badjudge run's heads file "
                              "(tune/judges/*/train/checkpoint_*/heads/*.safetensors)")
        for name, path in judges.items():
            p = Path(path).expanduser()
            if not p.is_file() or p.suffix != ".safetensors":
                raise ConfigError(f"--judge {name}={path}: no such heads file (a .safetensors file of a badjudge run)")


def judges_arg(values: list[str]) -> dict[str, str]:
    """``--judge NAME=FILE`` or ``--judge FILE`` (named by the file's stem) as {name: file}."""
    out: dict[str, str] = {}
    for v in values:
        name, _, path = v.rpartition("=") if "=" in v else (Path(v).stem, "", v)
        if not name:
            raise ConfigError(f"--judge {v}: give NAME=FILE or FILE")
        if name in out:
            raise ConfigError(f"--judge {v}: the name {name!r} is given twice")
        out[name] = path
    return out


def start(app: str, app_args: dict[str, Any], http: dict[str, Any], name: str | None = None,
          route_prefix: str = "/"):
    """Deploy ``app`` on the connected Ray (Serve's HTTP proxy on ``http``); returns its handle."""
    from ray import serve

    from .app import APPS

    serve.start(http_options={"host": http.get("host", "127.0.0.1"), "port": int(http.get("port", 8000))})
    return serve.run(APPS[app](app_args), name=name or app, route_prefix=route_prefix, blocking=False)


def serve_forever(app: str, app_args: dict[str, Any], http: dict[str, Any], address: str | None) -> int:
    check_app_args(app, app_args)
    from ray import serve

    from ..runtime import connect

    with connect(address, quiet=False):
        start(app, app_args, http)
        url = f"http://{http['host']}:{http['port']}/v1"
        log.info("serving %s at %s (OpenAI base_url); Ctrl-C stops", app, url)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            log.info("stopping ...")
        finally:
            serve.shutdown()
    return 0
