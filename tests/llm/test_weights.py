"""The one weights format (iclr_ray.llm.weights): safetensors plus JSON, tied tensors kept tied,
ZeRO-3 weights gathered before rank 0 writes (a real DeepSpeed engine on the CPU)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from iclr_ray.llm import weights  # noqa: E402
from iclr_ray.runtime import free_port  # noqa: E402


def _tied_state():
    emb = torch.nn.Embedding(7, 3)
    head = torch.nn.Linear(3, 7, bias=False)
    head.weight = emb.weight
    m = torch.nn.ModuleDict({"emb": emb, "head": head, "lin": torch.nn.Linear(4, 2)})
    state = m.state_dict()
    state["row"] = state["lin.weight"][1]  # a view into another tensor's storage
    return state


def test_round_trip_keeps_values_ties_and_metadata(tmp_path):
    state = _tied_state()
    loc = weights.save_weights(state, str(tmp_path / "m.safetensors"), {"kind": "test", "sizes": [7, 3]})
    back = weights.load_weights(loc)
    assert sorted(back) == sorted(state) and all(torch.equal(back[k], state[k]) for k in state)
    assert back["head.weight"] is back["emb.weight"]  # stored once, restored as one tensor
    assert back["row"].data_ptr() != back["lin.weight"].data_ptr()  # a view is its own copy
    meta = weights.read_meta(loc)
    assert meta["kind"] == "test" and meta["sizes"] == [7, 3] and meta["tensors"] == len(state)
    # nothing pickled: the file is plain safetensors that any reader opens
    from safetensors.torch import load_file

    assert set(load_file(tmp_path / "m.safetensors")) == set(state) - {"head.weight"}


def test_a_plain_safetensors_file_loads_and_a_wrong_name_is_refused(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.ones(2, 2)}, tmp_path / "plain.safetensors")
    assert torch.equal(weights.load_weights(str(tmp_path / "plain.safetensors"))["w"], torch.ones(2, 2))
    with pytest.raises(ValueError, match="ends in .safetensors"):
        weights.save_weights({"w": torch.ones(1)}, str(tmp_path / "model.pt"))


@pytest.mark.slow
def test_zero3_weights_are_gathered_before_rank_0_writes(tmp_path):
    """Under ZeRO-3 rank 0's own state dict holds empty placeholders (what a rank-0
    ``torch.save(engine.module.state_dict())`` writes); the saved file holds every weight."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0",
           "WORLD_SIZE": "1", "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1"}
    out = tmp_path / "model.safetensors"
    res = subprocess.run([sys.executable, str(Path(__file__).with_name("zero3_weights.py")), str(out)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["naive_numel"] == 0 < got["full_numel"]
    assert got["same_keys"] and got["equal"] and got["tied"]
    assert weights.read_meta(str(out))["zero_stage"] == 3


def test_no_module_pickles_weights_or_unpickles_a_file():
    """Trained weights are written in the one format (no ``torch.save`` of a state dict, which is
    rank 0's placeholders under ZeRO-3), and every ``torch.load`` refuses to run pickled code."""
    import ast

    import iclr_ray

    root = Path(iclr_ray.__file__).parent
    saves, loads = [], []
    for src in sorted(root.rglob("*.py")):
        text = src.read_text()
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
                continue
            where = f"{src.relative_to(root)}:{node.lineno}"
            if node.func.attr == "save" and node.args and "state_dict" in ast.get_source_segment(text, node.args[0]):
                saves.append(where)
            if node.func.attr == "load" and not any(k.arg == "weights_only" and isinstance(k.value, ast.Constant)
                                                    and k.value.value is True for k in node.keywords):
                loads.append(where)
    assert not saves, saves
    assert not loads, loads
