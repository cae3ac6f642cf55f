"""``iclr-ray list | run | sweep | serve | plan | report | doctor``.

Every user error (unknown study, bad config key or type, unreadable file, unusable run
directory) prints one line to stderr and exits 2 before Ray starts.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

from . import log as logs
from . import studies
from .claims import claims_table, split, summary_line
from .config import PRESETS, ConfigError, resolve, to_yaml
from .results import RunDir, RunDirError, default_run_dir, ranking

log = logs.get(__name__)

EXIT_USAGE = 2
USER_ERRORS = (ConfigError, RunDirError, studies.StudyUnavailable)


def _study_args(p: argparse.ArgumentParser, set_help: str) -> argparse.ArgumentParser:
    """What run, sweep and plan take alike: the study, its preset, a config file and --set items."""
    p.add_argument("study")
    p.add_argument("--preset", default="small", choices=PRESETS)
    p.add_argument("--config", metavar="FILE", help="YAML file of config values (over the preset)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=set_help)
    return p


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="iclr-ray", description="ICLR 2025 reproductions on Ray")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="implemented studies: title, paper, Ray parts")

    r = _study_args(sub.add_parser("run", help="run a study and write its run directory"),
                    "override one value, dots for nesting (repeatable; applied last)")
    r.add_argument("--out", metavar="DIR", help="run directory, a path or a URI such as s3://bucket/runs/x "
                   "(default: $ICLR_RAY_STORAGE or runs, then /<study>/<preset>-<time>)")
    r.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else embedded local Ray)")

    sw = _study_args(sub.add_parser("sweep", help="a Ray Tune sweep of a study's recipe over a search space"),
                     "override one value of the shared config (repeatable)")
    sw.add_argument("--space", required=True, metavar="FILE", help="search space YAML (tune_spaces/*.yaml)")
    sw.add_argument("--scheduler", choices=("fifo", "early"), default="early",
                    help="early: stop trials whose early grad-norm/loss profile ranks badly (default); "
                         "fifo: run every trial to the end")
    sw.add_argument("--out", metavar="DIR", help="sweep directory, a path or a URI (default: $ICLR_RAY_STORAGE or "
                    "runs, then /<study>/sweep-<preset>-<time>)")
    sw.add_argument("--resume", metavar="DIR", help="finish an interrupted sweep in DIR, a path or a URI (Tuner.restore)")
    sw.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else embedded local Ray)")

    sv = sub.add_parser("serve", help="serve a model over OpenAI-compatible HTTP with Ray Serve")
    sv.add_argument("app", choices=("generate", "embed", "pad", "judge", "recommend"),
                    help="generate: /v1/completions, /v1/chat/completions; embed: /v1/embeddings; pad: "
                         "/v1/chat/completions decoded by PAD with the request's preference; judge: /v1/judge "
                         "with badjudge's judges; recommend: /v1/recommend with an alpharec run's AlphaRec")
    sv.add_argument("--model", help="checkpoint dir, run dir, HF id or packaged model name (default: generate "
                    "smollm2-135m-instruct, embed all-MiniLM-L6-v2; both offline); embed also takes a "
                    "mixture-of-experts LM (a moee run's model): HS, RW or MoEE per request; recommend: an alpharec "
                    "run's bundle (artefacts/*/alpharec_bundle.pt)")
    sv.add_argument("--prm", help="pad: the personalised reward model (a pad run's PRM checkpoint)")
    sv.add_argument("--judge", action="append", default=[], metavar="NAME=FILE",
                    help="judge: a badjudge heads file served as NAME (repeatable; --model: their base model)")
    sv.add_argument("--config", metavar="FILE", help="a Serve config YAML (clusters/serve/*.yaml); its "
                    "application named APP gives the args, --model overrides")
    sv.add_argument("--device", help="where the models run: auto (the replica's GPU if it has one, else CPU; "
                    "the default), cpu, cuda, cuda:N; a GPU replica needs ray_actor_options: {num_gpus: 1}")
    sv.add_argument("--dtype", help="auto (bfloat16 on a GPU that has it, else float32; the default), float32, "
                    "bfloat16, float16")
    sv.add_argument("--host", help="bind address (default: the config's, else 127.0.0.1)")
    sv.add_argument("--port", type=int, help="HTTP port (default: the config's, else 8000)")
    sv.add_argument("--address", help="Ray cluster address (default: $RAY_ADDRESS, else embedded local Ray)")

    pl = _study_args(sub.add_parser("plan", help="what a run will ask for and cost (resources, parameters, memory "
                                    "per GPU, GPU-hours) and whether it fits a cluster file; trains and loads nothing"),
                     "override one value, dots for nesting (repeatable)")
    pl.add_argument("--cluster", metavar="FILE", help="a Ray cluster launcher YAML (clusters/gpu.yaml): check each "
                    "stage against its node types; exit 2 naming every stage that fits none")
    pl.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilisation assumed for GPU-hours "
                    "(default 0.4)")

    rep = sub.add_parser("report", help="re-render report.md and the claims table of a run directory")
    rep.add_argument("run_dir", help="a run directory: a path or a URI (s3://...)")

    d = sub.add_parser("doctor", help="what is installed, whether Ray is reachable, GPU or not")
    d.add_argument("--address", help="check this Ray cluster (default: $RAY_ADDRESS)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("run", "sweep", "serve") and not (args.address or os.environ.get("RAY_ADDRESS")):
        # Embedded Ray binds to 127.0.0.1 only, not to every interface of the laptop (read by
        # Ray when it is first imported, so before any study module loads).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    handler = {"list": cmd_list, "run": cmd_run, "sweep": cmd_sweep, "serve": cmd_serve, "plan": cmd_plan,
               "report": cmd_report, "doctor": cmd_doctor}[args.command]
    try:
        return handler(args)
    except USER_ERRORS as exc:
        print(f"iclr-ray: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def cmd_list(args: argparse.Namespace) -> int:
    """The registry alone: no study module is imported."""
    for e in studies.REGISTRY.values():
        missing = e.missing()
        note = f"\n{'':18s} unavailable here: needs {', '.join(missing)} ({studies.install_hint(e)})" if missing else ""
        print(f"{e.id:18s} {e.title}\n{'':18s} paper: {e.paper}\n{'':18s} ray: {'; '.join(e.ray)}{note}")
    return 0


@dataclass
class Started:
    """What ``run`` and ``sweep`` share before the study's work begins: every input checked, the
    run directory ready, Ray's address answering."""

    study: studies.Study
    cfg: Any
    inputs: Any
    run_dir: RunDir
    address: str | None


def _start(args: argparse.Namespace, cfg, run_dir: RunDir, config_yaml: str | None) -> Started:
    """prepare (input files: exit 2 before Ray), the Ray address (must answer), then the run
    directory (created, config.yaml written unless it is a resumed one's), in that order, so a
    user error leaves nothing written."""
    study = studies.get(args.study)
    inputs = study.prepare(cfg)
    from .runtime import resolve_address, seed_everything

    address = None if _ray_initialized() else resolve_address(args.address)
    if config_yaml is not None:
        run_dir.create()
        run_dir.write_config(config_yaml)
    seed_everything(cfg.seed)
    return Started(study, cfg, inputs, run_dir, address)


def _context(s: Started, preset: str):
    from .runtime import RunContext

    return RunContext(run_dir=s.run_dir, preset=preset, inputs=s.inputs)


def cmd_run(args: argparse.Namespace) -> int:
    study = studies.get(args.study)
    cfg = resolve(study.config, study.presets, args.preset, args.config, args.sets)
    run_dir = RunDir(args.out or default_run_dir(study.id, args.preset))
    config_yaml = to_yaml(cfg)
    earlier = run_dir.read_text("config.yaml")
    if earlier is not None and run_dir.read_text("result.json") is None and earlier != config_yaml:
        raise ConfigError(f"{run_dir} holds an unfinished run of another config; rerun it with the same "
                          "config to resume it, or choose another --out")
    s = _start(args, cfg, run_dir, config_yaml)
    log.info("# %s (%s) -> %s\n# resolved config:\n%s", study.id, args.preset, run_dir, config_yaml.rstrip())
    from .runtime import cluster_size, connect, hardware

    start = time.monotonic()
    with connect(s.address):
        metrics = study.run(cfg, _context(s, args.preset))
        size = cluster_size()
    seconds = time.monotonic() - start
    env = hardware() | size
    claims, checks = split(study.claims(metrics, cfg))
    result = {"study": study.id, "preset": args.preset, "config": cfg.model_dump(mode="json"), "metrics": metrics,
              "claims": [c.to_dict() for c in claims], "checks": [c.to_dict() for c in checks], "env": env,
              "seconds": seconds}
    run_dir.write_result(result)  # first: a figure that fails to draw loses nothing (`iclr-ray report` redraws)
    _render(study, cfg, run_dir, result)
    print(f"\n{claims_table(claims)}\n\n{summary_line(claims, checks)} in {seconds:.1f} s; "
          f"report: {run_dir.storage('report.md')}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    study = studies.get(args.study)
    if study.sweep is None:
        with_sweep = [e.id for e in studies.REGISTRY.values() if e.id != study.id and _has_sweep(e.id)]
        raise ConfigError(f"study {study.id!r} has no sweep; studies with one: {', '.join(with_sweep) or 'none'}")
    from .sweep.spaces import load_space

    if args.resume:
        run_dir = RunDir(args.resume)
        if run_dir.read_text("config.yaml") is None:
            raise ConfigError(f"--resume {run_dir}: no config.yaml there (not a sweep directory)")
        if run_dir.read_text("result.json") is not None:
            raise RunDirError(f"{run_dir} already holds a finished sweep")
        run_dir.pull()
        cfg = resolve(study.config, study.presets, args.preset, str(run_dir.path / "config.yaml"), [])
    else:
        run_dir = RunDir(args.out or default_run_dir(study.id, f"sweep-{args.preset}"))
        cfg = resolve(study.config, study.presets, args.preset, args.config, args.sets)
    space = load_space(args.space, study.config, base=cfg.model_dump(mode="json"))
    outside = [k for k in space.params if not k.startswith(study.sweepable)]
    if outside:
        raise ConfigError(f"{args.space}: {', '.join(outside)} cannot vary between trials; "
                          f"a {study.id} sweep varies keys under {', '.join(study.sweepable)}")
    s = _start(args, cfg, run_dir, None if args.resume else to_yaml(cfg))
    log.info("# %s sweep over %s (%s) -> %s", study.id, args.space, args.scheduler, run_dir)
    from .runtime import cluster_size, connect, hardware

    start = time.monotonic()
    with connect(s.address):
        summary = study.sweep(cfg, space, _context(s, args.preset), args.scheduler, bool(args.resume))
        size = cluster_size()
    seconds = time.monotonic() - start
    result = {"study": study.id, "preset": args.preset, "kind": "sweep", "space": str(args.space),
              "scheduler": args.scheduler, "config": cfg.model_dump(mode="json"), "metrics": summary, "claims": [],
              "env": hardware() | size,
              "seconds": seconds}
    run_dir.write_result(result)
    run_dir.write_report(result, f"{study.title} — sweep")
    best = summary.get("best") or {}
    print(f"\n{ranking(summary)}\n\nbest: {best.get('params')} {space.metric}={best.get(space.metric)} "
          f"({summary['finished']}/{summary['trials']} trials finished) in {seconds:.0f} s; "
          f"report: {run_dir.storage('report.md')}")
    return 0


def _has_sweep(study_id: str) -> bool:
    try:
        return studies.get(study_id).sweep is not None
    except studies.StudyUnavailable:
        return False


def cmd_serve(args: argparse.Namespace) -> int:
    from .serve.launch import check_app_args, default_model, load_serve_config, serve_forever

    app_args, http = load_serve_config(args.app, args.config)
    if args.model:
        app_args["model"] = args.model
    if args.prm:
        app_args["prm"] = args.prm
    if args.judge:
        from .serve.launch import judges_arg

        app_args["judges"] = judges_arg(args.judge)
    for key in ("device", "dtype"):
        if getattr(args, key):
            app_args[key] = getattr(args, key)
    if args.app in ("generate", "pad", "judge"):
        app_args["model"] = default_model(args.app, app_args.get("model"))
    check_app_args(args.app, app_args)
    http = {"host": args.host or http.get("host", "127.0.0.1"), "port": args.port or http.get("port", 8000)}
    from .runtime import resolve_address

    address = None if _ray_initialized() else resolve_address(args.address)
    return serve_forever(args.app, app_args, http, address)


def cmd_plan(args: argparse.Namespace) -> int:
    """Print a study's plan; exit 2 with one line per stage that fits no node type of --cluster."""
    from . import plan

    if not 0 < args.mfu <= 1:
        raise ConfigError(f"--mfu {args.mfu}: a share of the GPU's peak, in (0, 1]")
    study = studies.get(args.study)
    if study.plan is None:
        raise ConfigError(f"study {study.id!r} has no plan")
    nodes = plan.node_types(args.cluster) if args.cluster else None
    cfg = resolve(study.config, study.presets, args.preset, args.config, args.sets, planning=True)
    reports = plan.report(study.plan(cfg), nodes, args.mfu)
    print(plan.render(study.id, args.preset, reports, args.cluster, args.mfu))
    bad = [r for r in reports if r.fits is False]
    for r in bad:
        print(f"iclr-ray: plan: stage {r.stage.name!r} fits no node type of {args.cluster}: {r.reason}", file=sys.stderr)
    return EXIT_USAGE if bad else 0


def _ray_initialized() -> bool:
    import ray

    return ray.is_initialized()


def _render(study: studies.Study, cfg, run_dir: RunDir, result: dict) -> None:
    """plots/*.png and report.md from a run's result (both pure functions of its metrics)."""
    run_dir.clear_plots()  # a redraw leaves only the figures the study draws now
    run_dir.save_plots(study.plots(result["metrics"], cfg))
    run_dir.write_report(result, f"{study.title} — reproduction report", study.report_md(result["metrics"], cfg))


def cmd_report(args: argparse.Namespace) -> int:
    """Recompute a run's claims, figures and report.md from its result.json (a sweep: its report)."""
    run_dir = RunDir(args.run_dir)
    result = run_dir.read_result()
    run_dir.pull()
    study = studies.get(result.get("study", "?"))
    if result.get("kind") == "sweep":  # a sweep has no claims; its ranking is the report
        run_dir.write_report(result, f"{study.title} — sweep")
        print(f"{ranking(result['metrics'])}\n\nreport: {run_dir.storage('report.md')}")
        return 0
    try:
        cfg = study.config.model_validate(result["config"])
    except Exception as exc:  # a result.json written by an older, incompatible config
        raise ConfigError(f"{run_dir.storage('result.json')}: config no longer valid for {study.id}: {exc}") from None
    claims, checks = split(study.claims(result["metrics"], cfg))
    result["claims"], result["checks"] = [c.to_dict() for c in claims], [c.to_dict() for c in checks]
    run_dir.write_result(result)
    _render(study, cfg, run_dir, result)
    print(f"{claims_table(claims)}\n\n{summary_line(claims, checks)}; report: {run_dir.storage('report.md')}")
    return 0


DOCTOR_PACKAGES = ("ray", "numpy", "scipy", "pydantic", "matplotlib", "torch", "transformers",
                   "deepspeed", "gymnasium", "mani-skill", "httpx")


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
    for e in studies.REGISTRY.values():
        try:
            studies.get(e.id)
            print(f"  {e.id:18s} ok")
        except studies.StudyUnavailable as exc:
            print(f"  {e.id:18s} {exc}")
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
