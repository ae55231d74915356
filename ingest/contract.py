"""The data contract: every record that crosses a Kafka topic.

These pydantic models are the single source of truth. ``ingest/schemas/*.json``
is exported from them (``python -m ingest.schemas``) for producers written in
other languages, and a test keeps the two in sync.

Records are JSON, carry ``schema_version`` and are keyed by ``session_id`` on
Kafka. Validation is strict: unknown fields, unknown enum values, wrong types,
non-finite or positive logprobs and token/logprob length mismatches are all
rejected with a message that names the offending field.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

SCHEMA_VERSION = 1

# Size limits. They bound what one record may cost a stage downstream; a record
# over a limit is rejected with a message naming the limit.
MAX_RECORD_BYTES = 4 * 1024 * 1024
MAX_TURNS = 256
MAX_TOKENS_PER_TURN = 32_768
MAX_SESSION_TOKENS = 262_144
MAX_TEXT_CHARS = 262_144
MAX_ID_CHARS = 128

Id = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@/-]*$", min_length=1, max_length=MAX_ID_CHARS)
]
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)]
ShortText = Annotated[str, StringConstraints(max_length=1024)]
TokenId = Annotated[int, Strict(), Field(ge=0, lt=2**31)]
NonNegInt = Annotated[int, Strict(), Field(ge=0)]
NonNegFloat = Annotated[float, Strict(), Field(ge=0.0, allow_inf_nan=False)]
Logprob = Annotated[float, Strict(), Field(json_schema_extra={"maximum": 0})]  # finite, <= 0
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
ADAPTER_VERSION_PATTERN = r"^v[0-9]+$"  # v1, v2, ...: the learner numbers the versions it publishes
AdapterVersion = Annotated[str, StringConstraints(pattern=ADAPTER_VERSION_PATTERN, max_length=32)]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Record(BaseModel):
    """Base of every record: strict, closed to unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_json(self) -> bytes:
        return self.model_dump_json(exclude_none=False).encode()


# --- enums (closed) --------------------------------------------------------


class SessionStatus(StrEnum):
    COMPLETED = "completed"
    TIMEOUT = "timeout"
    TRUNCATED = "truncated"
    ERROR = "error"


class FeedbackKind(StrEnum):
    ACCEPT = "accept"
    REJECT = "reject"
    EDIT = "edit"


class LogprobsMode(StrEnum):
    """Which distribution ``behaviour_logprobs`` were taken from.

    ``processed``: after temperature/top-p (the distribution actually sampled).
    ``raw``: the model's logits before any sampling transform; the learner then
    applies the recorded temperature itself.
    """

    PROCESSED = "processed"
    RAW = "raw"


class HackKind(StrEnum):
    TEST_TAMPERING = "test_tampering"
    PROTECTED_ACCESS = "protected_access"
    SOLUTION_FETCHING = "solution_fetching"
    HARDCODED_OUTPUT = "hardcoded_output"
    EXCEPTION_SWALLOWING = "exception_swallowing"
    VERIFIER_GAMING = "verifier_gaming"


# --- session and turns -----------------------------------------------------


class PolicyRef(Record):
    base_model: ShortText
    adapter_version: AdapterVersion | None = None  # None: the base model served


class SamplingParams(Record):
    """What the engine sampled with: a learner reproduces only temperature-scaled sampling, so a turn
    with nucleus/top-k/min-p truncation, penalties or greedy decoding carries no loss."""

    temperature: NonNegFloat = 1.0
    top_p: Annotated[float, Strict(), Field(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Strict(), Field(ge=-1)] = -1  # -1 or 0: no top-k
    min_p: Annotated[float, Strict(), Field(ge=0.0, le=1.0)] = 0.0
    presence_penalty: Annotated[float, Strict(), Field(ge=-2.0, le=2.0)] = 0.0
    frequency_penalty: Annotated[float, Strict(), Field(ge=-2.0, le=2.0)] = 0.0
    repetition_penalty: Annotated[float, Strict(), Field(gt=0.0)] = 1.0
    max_tokens: NonNegInt | None = None

    def unreproducible(self) -> str | None:
        """Why a trainer cannot recompute the distribution these tokens were drawn from, or None."""
        if self.temperature == 0.0:
            return "greedy"
        for name, neutral in (
            ("top_p", 1.0),
            ("min_p", 0.0),
            ("presence_penalty", 0.0),
            ("frequency_penalty", 0.0),
            ("repetition_penalty", 1.0),
        ):
            if getattr(self, name) != neutral:
                return name
        if self.top_k not in (-1, 0):
            return "top_k"
        return None


class AssistantTurn(Record):
    role: Literal["assistant"] = "assistant"
    turn_id: Id
    prompt_token_ids: Annotated[list[TokenId], Field(min_length=1, max_length=MAX_TOKENS_PER_TURN)]
    completion_token_ids: Annotated[list[TokenId], Field(min_length=1, max_length=MAX_TOKENS_PER_TURN)]
    behaviour_logprobs: Annotated[
        list[Logprob],
        Field(
            min_length=1,
            max_length=MAX_TOKENS_PER_TURN,
            description="The serving engine's log-probability of each completion token, finite and <= 0: "
            "exactly one per entry of completion_token_ids, in the same order (equal lengths; "
            "the schema cannot express it, the ingest API refuses a mismatch).",
        ),
    ]
    logprobs_mode: LogprobsMode = LogprobsMode.PROCESSED
    sampling: SamplingParams = SamplingParams()
    adapter_version: AdapterVersion | None = None  # the version that served this turn
    text: Text | None = None
    latency_s: NonNegFloat | None = None

    @field_validator("behaviour_logprobs")
    @classmethod
    def _logprobs_finite_and_nonpositive(cls, values: list[float]) -> list[float]:
        # fast path, in C: a nan or an infinity makes the sum non-finite; without one, max is exact
        # (a sum that overflows only sends the check to the loop, which then finds nothing)
        if math.isfinite(sum(values)) and max(values, default=0.0) <= 0.0:
            return values
        for i, lp in enumerate(values):
            if not math.isfinite(lp):
                raise ValueError(f"behaviour_logprobs[{i}] is {lp}: logprobs must be finite")
            if lp > 0.0:
                raise ValueError(f"behaviour_logprobs[{i}] is {lp}: a log-probability must be <= 0")
        return values

    @model_validator(mode="after")
    def _lengths_match(self) -> AssistantTurn:
        n_tokens, n_logprobs = len(self.completion_token_ids), len(self.behaviour_logprobs)
        if n_tokens != n_logprobs:
            raise ValueError(
                f"completion_token_ids has {n_tokens} tokens but behaviour_logprobs has {n_logprobs}: "
                "they must have one logprob per completion token"
            )
        return self


class ToolTurn(Record):
    role: Literal["tool"] = "tool"
    turn_id: Id
    name: ShortText
    arguments: Text  # JSON text as the model emitted it (may be malformed: that is a signal)
    output: Text
    exit_code: Annotated[int, Strict()] | None = None


class UserTurn(Record):
    role: Literal["user"] = "user"
    turn_id: Id
    text: Text


Turn = Annotated[AssistantTurn | ToolTurn | UserTurn, Field(discriminator="role")]


class Cost(Record):
    tokens: NonNegInt = 0
    seconds: NonNegFloat = 0.0


def _given(name: str) -> dict:
    return {"properties": {name: {"type": "integer"}}, "required": [name]}


class Outcome(Record):
    """Test and verifier results for a session, in-line or as a late record."""

    # What the schema can say of the counts: each pair given together, at least one pair
    # (that passed <= total, only the ingest API checks).
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [_given("tests_total"), _given("verifiers_total")],
            "allOf": [
                {"if": _given(a), "then": _given(b)}
                for x in ("tests", "verifiers")
                for a, b in ((f"{x}_passed", f"{x}_total"), (f"{x}_total", f"{x}_passed"))
            ],
        }
    )

    schema_version: Literal[1] = SCHEMA_VERSION
    outcome_id: Id
    session_id: Id
    tenant: Id
    tests_passed: Annotated[NonNegInt | None, Field(description="<= tests_total; given with it")] = None
    tests_total: Annotated[NonNegInt | None, Field(description="given with tests_passed")] = None
    verifiers_passed: Annotated[NonNegInt | None, Field(description="<= verifiers_total; given with it")] = (
        None
    )
    verifiers_total: Annotated[NonNegInt | None, Field(description="given with verifiers_passed")] = None
    details: Text | None = None
    created_at: datetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _counts_consistent(self) -> Outcome:
        pairs = (
            ("tests", self.tests_passed, self.tests_total),
            ("verifiers", self.verifiers_passed, self.verifiers_total),
        )
        for name, passed, total in pairs:
            if (passed is None) != (total is None):
                raise ValueError(f"{name}_passed and {name}_total must be given together")
            if passed is not None and passed > total:
                raise ValueError(f"{name}_passed ({passed}) exceeds {name}_total ({total})")
        if self.tests_total is None and self.verifiers_total is None:
            raise ValueError("an outcome needs tests_passed/tests_total or verifiers_passed/verifiers_total")
        return self


class Feedback(Record):
    """A user's verdict on a session, in-line or as a late record."""

    schema_version: Literal[1] = SCHEMA_VERSION
    feedback_id: Id
    session_id: Id
    tenant: Id
    kind: FeedbackKind
    edited_text: Text | None = None
    comment: Text | None = None
    created_at: datetime = Field(default_factory=utc_now)


class Session(Record):
    schema_version: Literal[1] = SCHEMA_VERSION
    session_id: Id
    tenant: Id
    task_id: Id | None = None  # sessions of one task form a group (retries, samples of one prompt)
    task_family: Id | None = None  # tasks of one kind share a running reward baseline
    policy: PolicyRef
    turns: Annotated[
        list[Turn],
        Field(
            min_length=1,
            max_length=MAX_TURNS,
            json_schema_extra={
                "contains": {"properties": {"role": {"const": "assistant"}}, "required": ["role"]}
            },
            description="At least one assistant turn; turn ids unique within the session, and at most "
            f"{MAX_SESSION_TOKENS} prompt + completion tokens over all assistant turns (these two the "
            "schema cannot express; the ingest API refuses them).",
        ),
    ]
    status: SessionStatus
    cost: Cost = Cost()
    outcome: Annotated[
        Outcome | None, Field(description="In-line outcome: its session_id and tenant are the session's.")
    ] = None
    feedback: Annotated[
        Feedback | None, Field(description="In-line feedback: its session_id and tenant are the session's.")
    ] = None
    metadata: dict[ShortText, ShortText] = Field(default_factory=dict, max_length=64)
    created_at: datetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _ids_and_sizes(self) -> Session:
        ids = [turn.turn_id for turn in self.turns]
        if len(set(ids)) != len(ids):
            i = next(i for i, turn_id in enumerate(ids) if turn_id in ids[:i])
            raise ValueError(f"turns[{i}].turn_id {ids[i]!r} is duplicated: turn ids must be unique")
        assistant = [turn for turn in self.turns if isinstance(turn, AssistantTurn)]
        total_tokens = sum(len(t.prompt_token_ids) + len(t.completion_token_ids) for t in assistant)
        if total_tokens > MAX_SESSION_TOKENS:
            raise ValueError(f"session has {total_tokens} tokens, over the limit of {MAX_SESSION_TOKENS}")
        if not assistant:
            raise ValueError("a session needs at least one assistant turn")
        for name, inline in (("outcome", self.outcome), ("feedback", self.feedback)):
            if inline is not None and (inline.session_id != self.session_id or inline.tenant != self.tenant):
                raise ValueError(f"in-line {name} must carry the session's session_id and tenant")
        return self

    def assistant_turns(self) -> list[AssistantTurn]:
        return [t for t in self.turns if isinstance(t, AssistantTurn)]

    def stamped(self) -> bool:
        """Whether its JSON gave every ``created_at`` (its own, the in-line outcome's and feedback's).
        Only then does parsing that JSON again give this same session: a missing one defaults to
        the time of parsing."""
        return "created_at" in self.model_fields_set and all(
            inline is None or "created_at" in inline.model_fields_set
            for inline in (self.outcome, self.feedback)
        )


# --- rewarded session --------------------------------------------------------


class TokenSpan(Record):
    """Completion tokens [start, end) of one assistant turn."""

    turn_id: Id
    start: NonNegInt
    end: NonNegInt

    @model_validator(mode="after")
    def _ordered(self) -> TokenSpan:
        if self.end < self.start:
            raise ValueError(f"span end ({self.end}) is before its start ({self.start})")
        return self


class HackFlag(Record):
    kind: HackKind
    evidence: Text
    spans: list[TokenSpan] = Field(default_factory=list)
    action: Literal["penalise", "mask", "exclude"] = "penalise"
    judge_verdict: ShortText | None = None


def _validated_once(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A :class:`Session` instance passes as it is: it was validated when made and is frozen.
    (pydantic runs a nested model's after-validators again on an instance, whatever
    ``revalidate_instances`` says; for the rewards worker that was one more pass over every turn of
    every session it scores.) Anything else, JSON included, is validated in full."""
    return value if type(value) is Session else handler(value)


class RewardedSession(Record):
    # An excluded session names why (that session_id and tenant are the embedded session's, and
    # that flag spans lie inside their turns, only the consumers check).
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"excluded": {"const": True}}, "required": ["excluded"]},
            "then": {
                "properties": {"exclusion_reason": {"type": "string", "minLength": 1}},
                "required": ["exclusion_reason"],
            },
        }
    )

    schema_version: Literal[1] = SCHEMA_VERSION
    session_id: Id
    tenant: Id
    revision: NonNegInt = 0  # amendments carry a higher revision
    session: Annotated[Session, WrapValidator(_validated_once)]
    reward: Number
    components: dict[ShortText, Number] = Field(default_factory=dict)
    turn_rewards: dict[Id, Number] | None = None
    flags: list[HackFlag] = Field(default_factory=list)
    excluded: Annotated[bool, Strict()] = False
    exclusion_reason: ShortText | None = None
    feedback_ids: list[Id] = Field(default_factory=list)
    outcome_ids: list[Id] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _consistent(self) -> RewardedSession:
        if self.session.session_id != self.session_id or self.session.tenant != self.tenant:
            raise ValueError("session_id and tenant must match the embedded session")
        if self.excluded and not self.exclusion_reason:
            raise ValueError("an excluded session needs an exclusion_reason")
        turn_ids = {t.turn_id for t in self.session.turns}
        for flag in self.flags:
            for span in flag.spans:
                if span.turn_id not in turn_ids:
                    raise ValueError(f"flag span names turn {span.turn_id!r}, which is not in the session")
        return self

    def to_json(self, session_json: bytes | None = None) -> bytes:
        """``session_json``: JSON of :attr:`session` that parses back to it (see
        :meth:`Session.stamped`), e.g. the bytes it was ingested as; it is embedded verbatim instead
        of serialising the session again (most of the cost)."""
        if session_json is None:
            return super().to_json()
        rest = self.model_dump_json(exclude={"session"}).encode()
        return b'%s,"session":%s}' % (rest[:-1], session_json)


class DeadLetter(Record):
    """A record that could not be processed, with the reason, kept for review."""

    schema_version: Literal[1] = SCHEMA_VERSION
    source: ShortText  # where it was rejected, e.g. "ingest.api:/v1/sessions" or "rewards"
    reason: Text
    payload: Text  # the raw input (truncated to MAX_TEXT_CHARS)
    session_id: ShortText | None = None
    tenant: ShortText | None = None
    created_at: datetime = Field(default_factory=utc_now)

    @classmethod
    def of(cls, source: str, reason: str, payload: bytes | str, **ids: str | None) -> DeadLetter:
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        return cls(source=source, reason=reason[:MAX_TEXT_CHARS], payload=text[:MAX_TEXT_CHARS], **ids)


# --- parsing with clear errors ---------------------------------------------------

R = TypeVar("R", bound=Record)


class ContractError(ValueError):
    """A record that breaks the contract. ``reason`` is one readable line per problem."""

    def __init__(self, reason: str, session_id: str | None = None, tenant: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.session_id = session_id
        self.tenant = tenant


def describe(exc: ValidationError) -> str:
    """One line per problem: ``turns.0.behaviour_logprobs: ...``."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "record"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}")
    return "; ".join(lines)


def _ids_of(raw: bytes | str) -> tuple[str | None, str | None]:
    try:
        obj = json.loads(raw)
    except ValueError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    sid, tenant = obj.get("session_id"), obj.get("tenant")
    return (sid if isinstance(sid, str) else None), (tenant if isinstance(tenant, str) else None)


def parse(model: type[R], raw: bytes | str, max_bytes: int = MAX_RECORD_BYTES) -> R:
    """Parse one JSON record, or raise :class:`ContractError` with a readable reason."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise ContractError(f"record is {size} bytes, over the limit of {max_bytes} bytes")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        sid, tenant = _ids_of(raw)
        raise ContractError(describe(exc), session_id=sid, tenant=tenant) from None


def parse_obj(model: type[R], obj: Any) -> R:
    """Validate an already-decoded JSON value exactly as :func:`parse` would."""
    return parse(model, json.dumps(obj))


RECORD_MODELS: dict[str, type[Record]] = {
    "session": Session,
    "feedback": Feedback,
    "outcome": Outcome,
    "rewarded_session": RewardedSession,
    "dead_letter": DeadLetter,
}
