"""What runs ask for comes from the config (resources.py): every study's ``paper`` preset asks for
GPUs where it trains, its ``smoke`` preset for none; the Ray requests built from a section; and the
early failure of a request no node can hold."""
import pytest
from pydantic import BaseModel

from iclr_ray import studies
from iclr_ray.config import resolve
from iclr_ray.resources import (AUTOSCALER_ENV, TaskResources, Unplaceable, WorkerResources, check_placeable,
                                scaling_config, task_options, worker_resources)


def sections(model):
    """Every pydantic model inside ``model`` (itself included), through lists and dicts."""
    if isinstance(model, BaseModel):
        yield model
        for name in type(model).model_fields:
            yield from sections(getattr(model, name))
    elif isinstance(model, (list, tuple)):
        for item in model:
            yield from sections(item)
    elif isinstance(model, dict):
        for item in model.values():
            yield from sections(item)


def gpus(section) -> float:
    if isinstance(section, WorkerResources):
        return section.gpus_per_worker
    if isinstance(section, TaskResources):
        return section.gpus_per_task
    return 0.0


PAPER_SETS = {"cluspro": ["data.root=/data/mit-states"]}
"""what a paper preset cannot run without (its docs' command line)"""


def load(study_id: str):
    try:
        return studies.get(study_id)
    except studies.StudyUnavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("study_id", sorted(studies.REGISTRY))
def test_paper_asks_for_gpus_where_it_trains_and_smoke_for_none(study_id):
    study = load(study_id)
    paper = resolve(study.config, study.presets, "paper", None, PAPER_SETS.get(study_id, []))
    if any("Train" in part for part in study.entry.ray):
        trains = [s for s in sections(paper) if isinstance(s, WorkerResources)]
        assert trains and any(s.gpus_per_worker > 0 for s in trains), f"{study_id}: paper trains on CPUs"
    smoke = resolve(study.config, study.presets, "smoke", None, [])
    asking = [type(s).__name__ for s in sections(smoke) if gpus(s) > 0 or getattr(s, "accelerator_type", None)]
    assert not asking, f"{study_id}: smoke asks for a GPU in {asking}"


def test_task_options_ask_for_what_the_section_says():
    assert task_options(TaskResources()) == {"num_cpus": 1.0}
    opts = task_options(TaskResources(cpus_per_task=2, gpus_per_task=0.5, accelerator_type="A10G"))
    assert opts == {"num_cpus": 2.0, "num_gpus": 0.5, "accelerator_type": "A10G"}


def test_worker_resources_carry_a_section_into_a_train_config():
    from iclr_ray.llm.recipe import TrainConfig

    s = WorkerResources(cpus_per_worker=4, gpus_per_worker=1, accelerator_type="A100")
    got = worker_resources(s)
    assert {k: got[k] for k in ("cpus_per_worker", "gpus_per_worker", "accelerator_type")} == \
        {"cpus_per_worker": 4.0, "gpus_per_worker": 1.0, "accelerator_type": "A100"}
    tc = TrainConfig(**got)
    assert (tc.cpus_per_worker, tc.gpus_per_worker, tc.accelerator_type) == (4.0, 1.0, "A100")


def test_scaling_config_from_a_section():
    cpu = scaling_config(WorkerResources(), num_workers=2)
    assert (cpu.num_workers, cpu.use_gpu, cpu.resources_per_worker, cpu.accelerator_type) == (2, False, {"CPU": 1.0},
                                                                                                  None)
    gpu = scaling_config(WorkerResources(cpus_per_worker=8, gpus_per_worker=1, accelerator_type="A10G"), num_workers=4)
    assert gpu.use_gpu and gpu.resources_per_worker == {"CPU": 8.0, "GPU": 1.0} and gpu.accelerator_type == "A10G"
    # inside a Tune trial a CPU worker leaves the trial its sliver of the node's CPUs
    assert scaling_config(WorkerResources(), num_workers=1, in_trial=True).resources_per_worker["CPU"] < 1.0


NODES = [{"Alive": True, "Resources": {"CPU": 16.0}}, {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 1.0}}]


def test_an_unplaceable_gpu_request_fails_at_once_naming_gpu(monkeypatch):
    monkeypatch.delenv(AUTOSCALER_ENV, raising=False)
    with pytest.raises(Unplaceable, match="GPU") as exc:
        check_placeable({"pad: decoding": {"CPU": 1.0, "GPU": 1.0}}, nodes=NODES)  # the GPU node is dead
    assert "pad: decoding" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(Unplaceable, match="accelerator"):
        check_placeable({"train": {"CPU": 1.0, "accelerator_type:A100": 0.001}}, nodes=NODES)


def test_an_autoscaler_may_add_the_node(monkeypatch):
    monkeypatch.setenv(AUTOSCALER_ENV, "1")
    check_placeable({"pad: decoding": {"CPU": 1.0, "GPU": 1.0}}, nodes=NODES)


def test_a_fitting_request_passes(monkeypatch):
    monkeypatch.delenv(AUTOSCALER_ENV, raising=False)
    nodes = NODES + [{"Alive": True, "Resources": {"CPU": 48.0, "GPU": 4.0, "accelerator_type:A10G": 1.0}}]
    check_placeable({"a": {"CPU": 16.0}, "b": {"CPU": 8.0, "GPU": 1.0, "accelerator_type:A10G": 0.001}}, nodes=nodes)
    check_placeable({"a": {"CPU": 1.0}}, nodes=[{"Alive": True, "Resources": {"CPU": 2.0}}])
