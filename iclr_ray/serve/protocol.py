"""The OpenAI-compatible request bodies the serving apps accept, and the error body they answer
with. Validation is pydantic: a malformed body becomes one 4xx answer naming the field, never a
500 and never a dead replica. Unknown fields are ignored, as OpenAI clients send extras (``user``,
``stream_options``, ...)."""
from __future__ import annotations

import json
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class APIError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}`` with ``status``."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    stream: bool = False
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = None
    n: int = Field(1, ge=1, le=1)
    """one choice per request (n > 1 is refused, not silently ignored)"""

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else v or []
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop takes up to 4 non-empty strings")
        return stops

    def stops(self) -> list[str]:
        return list(self.stop or [])


class CompletionRequest(_Request):
    prompt: Union[str, list[str]]
    max_tokens: int = Field(16, ge=1)

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list):
            if len(v) != 1:
                raise ValueError("send one prompt per request (a list of exactly one string)")
            v = v[0]
        return v


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: str


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)

    def token_limit(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default


class PADChatRequest(ChatCompletionRequest):
    preference: str = Field(min_length=1, max_length=2000)
    """the user's preference: a name the pad study knows (simple, excited, personal, or a+b), or
    free text the PRM reads before the last user message"""

    @field_validator("preference")
    @classmethod
    def _not_blank(cls, v):
        if not v.strip():
            raise ValueError("preference must not be blank")
        return v.strip()


class JudgeRequest(BaseModel):
    """One verdict from a judge (the badjudge study's formats): ``format`` names the judge prompt
    and which of the text fields it reads (pointwise: instruction, response; pairwise: instruction,
    response_a, response_b; toxicity: request; rerank: query, passage)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    format: Literal["pointwise", "pairwise", "toxicity", "rerank"]
    instruction: Optional[str] = Field(None, max_length=20000)
    response: Optional[str] = Field(None, max_length=20000)
    response_a: Optional[str] = Field(None, max_length=20000)
    response_b: Optional[str] = Field(None, max_length=20000)
    request: Optional[str] = Field(None, max_length=20000)
    query: Optional[str] = Field(None, max_length=20000)
    passage: Optional[str] = Field(None, max_length=20000)

    def fields(self) -> dict[str, str]:
        return {k: v for k, v in self.model_dump().items() if k not in ("model", "format") and v is not None}


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    input: Union[str, list[str]]
    encoding_format: Literal["float"] = "float"
    representation: Optional[Literal["hs", "rw", "moee"]] = None
    """a mixture-of-experts LM's embedding (the moee study): its last hidden state (hs), its routing
    weights (rw), or MoEE (sum) as one vector (moee, the default); not for an encoder model"""

    @field_validator("input")
    @classmethod
    def _non_empty(cls, v):
        texts = [v] if isinstance(v, str) else v
        if not texts or any(not isinstance(t, str) or not t for t in texts):
            raise ValueError("input must be a non-empty string or a non-empty list of non-empty strings")
        return texts


class RecommendRequest(BaseModel):
    """Top-K items for a user of the training data (``user``: its original id) or for a history
    (``history``: catalogue item ids, and titles: a catalogue title exactly as listed counts as that
    item, any other text is embedded as a free-text title by the model's language model)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    user: Optional[int] = None
    history: list[Union[int, str]] = Field(default_factory=list, max_length=10000)
    k: int = Field(20, ge=1, le=1000)
    exclude_history: bool = True
    """leave the user's known items (training interactions, or the history) out of the ranking"""

    @field_validator("history")
    @classmethod
    def _titles_non_empty(cls, v):
        if any(isinstance(h, str) and not h.strip() for h in v):
            raise ValueError("history titles must be non-empty strings")
        return v

    @model_validator(mode="after")
    def _someone(self):
        if self.user is None and not self.history:
            raise ValueError("give a user id or a non-empty history")
        if self.user is not None and self.history:
            raise ValueError("give a user id or a history, not both")
        return self


def parse(model_cls: type[BaseModel], raw: bytes):
    """A request body as ``model_cls``, or an APIError(400) naming what is wrong."""
    try:
        data = json.loads(raw or b"")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object")
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        raise APIError(400, f"{param}: {err['msg']}" if param else err["msg"], param=param) from None
