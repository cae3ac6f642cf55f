"""What each Ray Train run, Tune trial and Ray task asks for: configuration, never inferred.

A study's config says what its stages need (:class:`WorkerResources` on a section that trains,
:class:`TaskResources` on one that runs tasks); ``paper`` presets ask for GPUs. Reading
``ray.cluster_resources()`` to decide is a defect: an autoscaling cluster has no GPU node until
one is asked for, so a run that looks first trains on the head's CPUs.

:func:`scaling_config` and :func:`task_options` turn a section into Ray's own request (the one
place that does), and :func:`check_placeable` ends a run whose request no node can ever meet (on a
cluster without an autoscaler) at once, with one line naming the resource, instead of a silent wait.
"""
from __future__ import annotations

import math
import os
from typing import Any, Mapping

from pydantic import Field

from .config import ConfigError, Section

AUTOSCALER_ENV = "ICLR_RAY_AUTOSCALER"
"""set (to 1) where an autoscaler adds nodes on demand (clusters/runtime_env.yaml): a request no
current node can meet then waits for a new node instead of failing"""

TRIAL_CPU = 0.01
"""what a Tune trial itself holds: it only drives its Train run or tasks (sweep/tuner.py)"""


class WorkerResources(Section):
    """What each Ray Train worker of a section's runs asks for."""

    cpus_per_worker: float = Field(1.0, ge=0)
    gpus_per_worker: float = Field(0.0, ge=0)
    """0: CPU workers (gloo); > 0: GPU workers (NCCL), placed on nodes that have them"""
    accelerator_type: str | None = None
    """a GPU model the workers need (Ray's accelerator types: "A10G", "L4", "A100", "H100", ...)"""
    placement_timeout_s: float = Field(900.0, gt=0)
    """how long a run waits for its workers to be placed (other runs finishing, an autoscaler adding
    a node) before it fails with one line naming what it waited for"""


class TaskResources(Section):
    """What each Ray task of a section asks for."""

    cpus_per_task: float = Field(1.0, ge=0)
    gpus_per_task: float = Field(0.0, ge=0)
    accelerator_type: str | None = None
    """a GPU model the tasks need (Ray's accelerator types)"""


def _accelerator(name: str | None) -> dict[str, float]:
    # Ray's own label for a node's GPU model; asking for a sliver of it pins the placement
    return {f"accelerator_type:{name}": 0.001} if name else {}


def worker_resources(section: Any) -> dict[str, Any]:
    """A section's :class:`WorkerResources` fields, to pass on into a ``TrainConfig``."""
    return {k: getattr(section, k) for k in WorkerResources.model_fields}


START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
START_TIMEOUT_S = 60.0
"""Ray Train's wait for a worker group's placement group before it gives up and asks again (its
default; the variable is read by the Train controller, so set on the cluster or the job)"""


def placement_retries(section: Any) -> int:
    """``FailureConfig.controller_failure_limit`` that bounds a Train run's wait for its workers to
    :attr:`WorkerResources.placement_timeout_s` (Ray Train's own default retries forever)."""
    start = float(os.environ.get(START_TIMEOUT_ENV) or START_TIMEOUT_S)
    return max(0, math.ceil(section.placement_timeout_s / start) - 1)


def worker_bundle(section: Any, in_trial: bool = False) -> dict[str, float]:
    """One Train worker's resource bundle. Inside a Tune trial the trial already holds
    :data:`TRIAL_CPU` of its node's CPUs, so a CPU worker asks for that much less (trials sized to
    a machine then start together instead of waiting on each other)."""
    cpus = float(section.cpus_per_worker)
    if in_trial and not section.gpus_per_worker and cpus >= 1:
        cpus -= TRIAL_CPU
    bundle = {"CPU": cpus}
    if section.gpus_per_worker:
        bundle["GPU"] = float(section.gpus_per_worker)
    return bundle | _accelerator(section.accelerator_type)


def scaling_config(section: Any, num_workers: int, in_trial: bool = False):
    """Ray Train's ``ScalingConfig`` from a section with :class:`WorkerResources` fields."""
    from ray.train import ScalingConfig

    bundle = worker_bundle(section, in_trial)
    return ScalingConfig(num_workers=num_workers, use_gpu=bool(section.gpus_per_worker),
                         resources_per_worker={k: v for k, v in bundle.items() if not k.startswith("accelerator_type:")},
                         accelerator_type=section.accelerator_type)


def task_options(section: Any, stage: str | None = None) -> dict[str, Any]:
    """``.options(**...)`` of a Ray task from a section with :class:`TaskResources` fields. With
    ``stage`` (a name for the error line; Ray must be initialised), a request no node can meet
    raises :class:`Unplaceable` here, before any task is submitted."""
    opts: dict[str, Any] = {"num_cpus": float(section.cpus_per_task)}
    if section.gpus_per_task:
        opts["num_gpus"] = float(section.gpus_per_task)
    if section.accelerator_type:
        opts["accelerator_type"] = section.accelerator_type
    if stage is not None:
        check_placeable({stage: task_bundle(opts)})
    return opts


def task_bundle(options: Mapping[str, Any]) -> dict[str, float]:
    """The resources a task's options ask for, as a bundle :func:`check_placeable` reads."""
    bundle = {"CPU": float(options.get("num_cpus", 1))}
    if options.get("num_gpus"):
        bundle["GPU"] = float(options["num_gpus"])
    return bundle | _accelerator(options.get("accelerator_type"))


class Unplaceable(ConfigError):
    """A request no node of the cluster can meet, on a cluster that adds no nodes."""


def autoscaling() -> bool:
    return os.environ.get(AUTOSCALER_ENV, "").strip().lower() in ("1", "true", "yes")


def check_placeable(bundles: Mapping[str, Mapping[str, float]], nodes: list[dict] | None = None) -> None:
    """Raise :class:`Unplaceable` naming the first stage whose bundle fits no alive node's total
    resources, unless an autoscaler can add nodes (:data:`AUTOSCALER_ENV`). ``bundles``: stage
    name -> one worker's or task's resources. ``nodes`` (``ray.nodes()`` by default) is read only
    to say no early: what a run asks for comes from its config."""
    if autoscaling():
        return
    if nodes is None:
        import ray

        nodes = ray.nodes()
    totals = [n.get("Resources", {}) for n in nodes if n.get("Alive", n.get("alive", True))]
    for stage, bundle in bundles.items():
        if any(all(t.get(k, 0.0) >= v - 1e-9 for k, v in bundle.items() if v > 0) for t in totals):
            continue
        short = [k for k, v in bundle.items() if v > 0 and not any(t.get(k, 0.0) >= v - 1e-9 for t in totals)]
        missing = short[0] if short else next(iter(bundle))
        ask = ", ".join(_describe(k, v) for k, v in bundle.items())
        if missing.startswith("accelerator_type:"):
            have = "no node has that accelerator"
        else:
            have = f"at most {max((t.get(missing, 0.0) for t in totals), default=0.0):g} {missing} on one node"
        raise Unplaceable(f"{stage} asks for {ask} (each worker or task), but no node of this cluster can hold it "
                          f"({have}) and no autoscaler adds nodes (set {AUTOSCALER_ENV}=1 where one does); lower "
                          "the request in the config or run on a cluster that has it")


def _describe(key: str, value: float) -> str:
    if key.startswith("accelerator_type:"):
        return f"accelerator_type={key.split(':', 1)[1]}"
    return f"{key}={value:g}"
