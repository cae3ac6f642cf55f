"""``iclr-ray list | run | sweep | serve | report | doctor``.

Every user error (unknown study, bad config key or type, unreadable file, unusable run
directory) prints one line to stderr and exits 2 before Ray starts.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from . import studies
from .claims import Claim, claims_table, summary_line
from .config import PRESETS, ConfigError, resolve, to_yaml
from .results import RunDir, RunDirError, atomic_write_text, default_run_dir

EXIT_USAGE = 2
USER_ERRORS = (ConfigError, RunDirError, studies.StudyUnavailable)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="iclr-ray", description="ICLR 2025 reproductions on Ray")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="implemented studies: title, paper, Ray parts")

    r = sub.add_parser("run", help="run a study and write its run directory")
    r.add_argument("study")
    r.add_argument("--preset", default="small", choices=PRESETS)
    r.add_argument("--config", metavar="FILE", help="YAML file of config values (over the preset)")
    r.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override one value, dots for nesting (repeatable; applied last)")
    r.add_argument("--out", metavar="DIR", help="run directory (default: runs/<study>/<preset>-<time>)")
    r.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else embedded local Ray)")

    sw = sub.add_parser("sweep", help="a Ray Tune sweep of a study's recipe over a search space")
    sw.add_argument("study")
    sw.add_argument("--space", required=True, metavar="FILE", help="search space YAML (tune_spaces/*.yaml)")
    sw.add_argument("--preset", default="small", choices=PRESETS)
    sw.add_argument("--config", metavar="FILE", help="YAML file of config values (over the preset)")
    sw.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override one value of the shared config (repeatable)")
    sw.add_argument("--scheduler", choices=("fifo", "early"), default="early",
                    help="early: stop trials whose early grad-norm/loss profile ranks badly (default); "
                         "fifo: run every trial to the end")
    sw.add_argument("--out", metavar="DIR", help="sweep directory (default: runs/<study>/sweep-<preset>-<time>)")
    sw.add_argument("--resume", metavar="DIR", help="finish an interrupted sweep in DIR (Tuner.restore)")
    sw.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else embedded local Ray)")

    sv = sub.add_parser("serve", help="serve a model over OpenAI-compatible HTTP with Ray Serve")
    sv.add_argument("app", choices=("generate", "embed"),
                    help="generate: /v1/completions, /v1/chat/completions; embed: /v1/embeddings")
    sv.add_argument("--model", help="checkpoint dir, run dir or HF id (embed: default all-MiniLM-L6-v2)")
    sv.add_argument("--config", metavar="FILE", help="a Serve config YAML (clusters/serve/*.yaml); its "
                    "application named APP gives the args, --model overrides")
    sv.add_argument("--host", help="bind address (default: the config's, else 127.0.0.1)")
    sv.add_argument("--port", type=int, help="HTTP port (default: the config's, else 8000)")
    sv.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else embedded local Ray)")

    rep = sub.add_parser("report", help="re-render report.md and the claims table of a run directory")
    rep.add_argument("run_dir")

    d = sub.add_parser("doctor", help="what is installed, whether Ray is reachable, GPU or not")
    d.add_argument("--address", help="check this Ray cluster (default: $RAY_ADDRESS)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("run", "sweep", "serve") and not (args.address or os.environ.get("RAY_ADDRESS")):
        # Embedded Ray binds to 127.0.0.1 only, not to every interface of the laptop (read by
        # Ray when it is first imported, so before any study module loads).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    handler = {"list": cmd_list, "run": cmd_run, "sweep": cmd_sweep, "serve": cmd_serve, "report": cmd_report,
               "doctor": cmd_doctor}[args.command]
    try:
        return handler(args)
    except USER_ERRORS as exc:
        print(f"iclr-ray: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def cmd_list(args: argparse.Namespace) -> int:
    for study_id, study, reason in studies.available():
        if study is None:
            print(f"{study_id:18s} (unavailable: {reason})")
        else:
            print(f"{study_id:18s} {study.title}\n{'':18s} paper: {study.paper}\n"
                  f"{'':18s} ray: {', '.join(study.ray)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    study = studies.get(args.study)
    cfg = resolve(study.config, study.presets, args.preset, args.config, args.sets)
    inputs = study.prepare(cfg) if study.prepare else None
    from .runtime import RunContext, connect, hardware, resolve_address, seed_everything

    address = None if _ray_initialized() else resolve_address(args.address)
    run_dir = RunDir(args.out or default_run_dir(study.id, args.preset))
    config_yaml = to_yaml(cfg)
    earlier = run_dir.path / "config.yaml"
    if earlier.is_file() and not (run_dir.path / "result.json").exists() and earlier.read_text() != config_yaml:
        raise ConfigError(f"{run_dir.path} holds an unfinished run of another config; rerun it with the same "
                          "config to resume it, or choose another --out")
    run_dir = run_dir.create()
    run_dir.write_config(config_yaml)
    print(f"# {study.id} ({args.preset}) -> {run_dir.path}\n# resolved config:\n{config_yaml}", flush=True)

    seed_everything(cfg.seed)
    start = time.monotonic()
    with connect(address) as resources:
        ctx = RunContext(run_dir=run_dir, preset=args.preset, resources=resources, inputs=inputs)
        metrics = study.run(cfg, ctx)
    seconds = time.monotonic() - start
    claims = study.claims(metrics, cfg)
    env = hardware()
    env["cluster_cpus"] = resources.get("CPU")
    env["cluster_gpus"] = resources.get("GPU", 0)
    result = {
        "study": study.id,
        "preset": args.preset,
        "config": cfg.model_dump(mode="json"),
        "metrics": metrics,
        "claims": [c.to_dict() for c in claims],
        "env": env,
        "seconds": seconds,
    }
    run_dir.write_result(result)
    _render(study, run_dir, result)
    print(f"\n{claims_table(claims)}\n\n{summary_line(claims)} in {seconds:.1f} s; "
          f"report: {run_dir.path / 'report.md'}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    study = studies.get(args.study)
    if study.sweep is None:
        raise ConfigError(f"study {study.id!r} has no sweep; studies with one: "
                          f"{', '.join(s.id for _, s, _ in studies.available() if s and s.sweep) or 'none'}")
    from .sweep.spaces import load_space

    if args.resume:
        out = Path(args.resume)
        saved = out / "config.yaml"
        if not saved.is_file():
            raise ConfigError(f"--resume {out}: no config.yaml there (not a sweep directory)")
        cfg = resolve(study.config, study.presets, args.preset, str(saved), [])
    else:
        cfg = resolve(study.config, study.presets, args.preset, args.config, args.sets)
    space = load_space(args.space, study.config, base=cfg.model_dump(mode="json"))
    outside = [k for k in space.params if not k.startswith(study.sweepable)]
    if outside:
        raise ConfigError(f"{args.space}: {', '.join(outside)} cannot vary between trials; "
                          f"a {study.id} sweep varies keys under {', '.join(study.sweepable)}")
    inputs = study.prepare(cfg) if study.prepare else None
    from .runtime import RunContext, connect, resolve_address, seed_everything

    address = None if _ray_initialized() else resolve_address(args.address)
    if args.resume:
        run_dir = RunDir(args.resume)
        if (run_dir.path / "result.json").exists():
            raise RunDirError(f"{run_dir.path} already holds a finished sweep")
    else:
        run_dir = RunDir(args.out or default_run_dir(study.id, f"sweep-{args.preset}")).create()
        run_dir.write_config(to_yaml(cfg))
    print(f"# {study.id} sweep over {args.space} ({args.scheduler}) -> {run_dir.path}", flush=True)
    seed_everything(cfg.seed)
    start = time.monotonic()
    with connect(address) as resources:
        ctx = RunContext(run_dir=run_dir, preset=args.preset, resources=resources, inputs=inputs)
        summary = study.sweep(cfg, space, ctx, args.scheduler, bool(args.resume))
    seconds = time.monotonic() - start
    run_dir.write_result({"study": study.id, "preset": args.preset, "kind": "sweep", "space": str(args.space),
                          "scheduler": args.scheduler, "config": cfg.model_dump(mode="json"), "metrics": summary,
                          "claims": [], "seconds": seconds})
    best = summary.get("best") or {}
    plots = sorted(p.name for p in run_dir.plots.glob("*.png"))
    atomic_write_text(run_dir.path / "report.md", "\n".join([
        f"# {study.title} — sweep", "",
        f"Space `{args.space}`, scheduler `{args.scheduler}`, {summary.get('finished', 0)} of "
        f"{summary.get('trials', 0)} trials finished in {seconds:.0f} s; ranked by {space.metric} ({space.mode}).", "",
        summary.get("table", ""), "", f"Best: `{best.get('params')}` {space.metric} = {best.get(space.metric)}", "",
        *[f"![{p}](plots/{p})" for p in plots],
        f"TensorBoard: `tensorboard --logdir {run_dir.path / 'tune'}`", ""]))
    print(f"\n{summary.get('table', '')}\n\nbest: {best.get('params')} {space.metric}={best.get(space.metric)} "
          f"({summary.get('finished', 0)}/{summary.get('trials', 0)} trials finished) in {seconds:.0f} s; "
          f"TensorBoard: tensorboard --logdir {run_dir.path / 'tune'}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .serve.launch import check_model, load_serve_config, serve_forever

    app_args, http = load_serve_config(args.app, args.config)
    if args.model:
        app_args["model"] = args.model
    check_model(args.app, app_args.get("model"))
    http = {"host": args.host or http.get("host", "127.0.0.1"), "port": args.port or http.get("port", 8000)}
    from .runtime import resolve_address

    address = None if _ray_initialized() else resolve_address(args.address)
    return serve_forever(args.app, app_args, http, address)


def _ray_initialized() -> bool:
    import ray

    return ray.is_initialized()


def _render(study: studies.Study, run_dir: RunDir, result: dict) -> None:
    extra = study.report_md(result["metrics"]) if study.report_md else ""
    run_dir.write_report(result, f"{study.title} — reproduction report", extra)


def cmd_report(args: argparse.Namespace) -> int:
    run_dir = RunDir(args.run_dir)
    result = run_dir.read_result()
    study = studies.get(result.get("study", "?"))
    if result.get("kind") == "sweep":  # a sweep has no claims; its ranking is the report
        m = result["metrics"]
        best = m.get("best") or {}
        print(f"{m.get('table', '')}\n\nbest: {best.get('params')} {m.get('metric')}={best.get(m.get('metric'))}")
        return 0
    try:
        cfg = study.config.model_validate(result["config"])
    except Exception as exc:  # a result.json written by an older, incompatible config
        raise ConfigError(f"{run_dir.path}/result.json: config no longer valid for {study.id}: {exc}") from None
    claims: list[Claim] = study.claims(result["metrics"], cfg)
    result["claims"] = [c.to_dict() for c in claims]
    run_dir.write_result(result)
    _render(study, run_dir, result)
    print(f"{claims_table(claims)}\n\n{summary_line(claims)}; report: {run_dir.path / 'report.md'}")
    return 0


DOCTOR_PACKAGES = ("ray", "numpy", "scipy", "pydantic", "matplotlib", "torch", "transformers",
                   "deepspeed", "accelerate", "gymnasium", "mani-skill", "httpx")


def cmd_doctor(args: argparse.Namespace) -> int:
    from .runtime import hardware

    print("packages:")
    for name in DOCTOR_PACKAGES:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        print(f"  {name:14s} {version}")
    hw = hardware()
    gpu = f"yes ({hw.get('gpus')} x {hw.get('gpu_name')})" if hw.get("cuda") else "no (CPU only)"
    print(f"python {hw['python']} on {hw['platform']}, {hw['cpus']} CPUs, GPU: {gpu}")
    print("studies:")
    for study_id, study, reason in studies.available():
        print(f"  {study_id:18s} {'ok' if study else reason}")
    address = args.address or os.environ.get("RAY_ADDRESS")
    if not address:
        print("ray: no cluster address; `iclr-ray run` starts an embedded local Ray")
        return 0
    import ray

    from .runtime import check_reachable

    try:
        check_reachable(address)
        ray.init(address=address, configure_logging=False, log_to_driver=False)
    except Exception as exc:  # any failure to connect is the answer doctor gives
        print(f"ray: {str(exc).splitlines()[0]}")
        return 1
    try:
        res = ray.cluster_resources()
        print(f"ray: reached {address}: {res.get('CPU', 0):g} CPUs, {res.get('GPU', 0):g} GPUs, "
              f"{len(ray.nodes())} nodes")
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
