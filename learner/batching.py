"""Rewarded sessions → per-token training rows, masks and advantages.

Admission (``admit``), per ``(session_id, revision)``:

* a pair already seen is a ``duplicate`` (rewarded.v1 is at-least-once);
* a revision at or below one already trained, or below a higher revision in
  the same micro-batch, is ``superseded``;
* a higher revision of a session already trained is an **amendment**;
* anything else is ``fresh``.

A fresh session is skipped with a counted reason when it is ``excluded``,
carries a hack flag whose action is ``exclude`` (``hack_excluded``), was
served by an adapter version the store does not hold (``unknown_version``),
is more than ``max_staleness`` versions away from the learner's head (the version
its weights descend from: its last published version, or the champion it rebased
on) in the lineage tree, or was recorded more than ``max_staleness_s`` ago
(``stale``; see :meth:`Limits.behind`), has a turn longer than ``max_row_tokens``
(``too_long``), was sampled only in ways a trainer cannot recompute
(``unreproducible_sampling``: greedy, top-p/top-k/min-p truncation, penalties),
or has no action token left after masking (``no_action_tokens``). A single
turn sampled that way carries no loss, and the ledger names it with its reason.

No signal, no update: when two or more fresh sessions of a micro-batch differ
in nothing but cost (``skip_uniform_batches``), or every advantage left is
zero (an all-equal group, a family still without a baseline), the batch takes
no optimisation step and its sessions are recorded as ``no_signal``. With the
same setting, a task's group within the batch (sessions sharing a task id, at
least ``min_group_size`` of them) whose sessions differ in nothing but cost is
left out of the update, its sessions recorded as ``no_signal``: against their
group baseline they carry no policy gradient, and their forward and backward
passes would only cost time (the KL anchor still acts on every token trained).

Amendments (a reward revised after the session was trained). The policy
gradient is linear in the advantage, so the update a session should have
contributed is reached by training it once more with the *difference*::

    A_t(correction) = A_new·keep_new(t) − A_trained·keep_trained(t)

where ``A_new`` is the revised signals scored against the baselines and scale
used when the session was trained, and ``keep(t)`` is 1 on the action tokens
each revision left unmasked (0 everywhere for an excluded revision, which so
undoes the earlier update). A correction can be negative (a late reject of a
session trained as a success): it is applied as it is, whatever
``negative_advantage_weight`` says, because it withdraws an update that was
made rather than learning from a failure. The correction obeys the same staleness bound as
fresh sessions (a too-old amendment is dropped as ``stale``, and the earlier
update stands), updates no baseline, and becomes the session's trained
revision. A revision that arrives while an older one waits in the same
micro-batch simply replaces it; a new revision of a session that was seen but
never trained (skipped, no signal) is a fresh session.

Which version served a turn: ``AssistantTurn.adapter_version`` when set, else
``Session.policy.adapter_version``; ``None`` means the base model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property

import torch

from ingest.contract import AssistantTurn, LogprobsMode, RewardedSession
from learner.advantages import Advantage, AdvantageParams, Baselines, amended, score, scored, signals
from learner.lineage import ancestry, distance
from learner.store import version_number

BASE = None  # adapter version of the base model


@dataclass(frozen=True)
class Trained:
    """What the ledger remembers of a session once it has been trained."""

    revision: int
    advantage: Advantage
    masked: tuple[tuple[str, int, int], ...]  # (turn_id, start, end) spans that carried no loss
    excluded: bool = False


@dataclass(frozen=True)
class Admitted:
    rewarded: RewardedSession
    kind: str  # "fresh", "amendment" or a skip reason
    previous: Trained | None = None


def admit(
    batch: list[RewardedSession], trained: dict[str, Trained], seen: set[tuple[str, int]]
) -> list[Admitted]:
    """Classify each record of a micro-batch against what was trained before (in input order)."""
    best: dict[str, int] = {}
    for rs in batch:
        best[rs.session_id] = max(best.get(rs.session_id, -1), rs.revision)
    out: list[Admitted] = []
    taken: set[tuple[str, int]] = set()
    for rs in batch:
        key = (rs.session_id, rs.revision)
        previous = trained.get(rs.session_id)
        if key in seen or key in taken:
            out.append(Admitted(rs, "duplicate"))
        elif rs.revision < best[rs.session_id] or (previous is not None and rs.revision <= previous.revision):
            out.append(Admitted(rs, "superseded", previous))
        elif previous is not None:
            out.append(Admitted(rs, "amendment", previous))
        else:
            out.append(Admitted(rs, "fresh"))
        taken.add(key)
    return out


def served_version(rs: RewardedSession, turn: AssistantTurn) -> str | None:
    return turn.adapter_version or rs.session.policy.adapter_version


def masked_spans(rs: RewardedSession) -> tuple[tuple[str, int, int], ...]:
    return tuple(
        (span.turn_id, span.start, span.end)
        for flag in rs.flags
        if flag.action == "mask"
        for span in flag.spans
    )


def is_excluded(rs: RewardedSession) -> str | None:
    if rs.excluded:
        return "excluded"
    if any(flag.action == "exclude" for flag in rs.flags):
        return "hack_excluded"
    return None


def staleness(rs: RewardedSession, limits: Limits) -> int:
    """Versions between the learner's head and the farthest of those that served a turn."""
    return max((limits.behind(served_version(rs, t)) for t in rs.session.assistant_turns()), default=0)


def age_s(rs: RewardedSession, now: float) -> float:
    """Seconds since the session was recorded."""
    return max(0.0, now - rs.session.created_at.timestamp())


def looks_stale(value: bytes, limits: Limits) -> bool:
    """Whether a rewarded record, as bytes, will be skipped as ``stale`` (:func:`check`), read from its
    JSON without the contract's parse; anything unexpected says no (the parse decides later). The
    learner's consumer lets such records ride along without counting them toward a micro-batch."""
    try:
        data = json.loads(value)
        session = data["session"]
        default = (session.get("policy") or {}).get("adapter_version")
        served = [
            t.get("adapter_version") or default for t in session["turns"] if t.get("role") == "assistant"
        ]
        created = datetime.fromisoformat(session["created_at"]).timestamp()
        behind = max(limits.behind(v) for v in served if v is None or v in limits.known_versions)
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
    return behind > limits.max_staleness or limits.now - created > limits.max_staleness_s


def check(rs: RewardedSession, limits: Limits) -> str | None:
    """Why a session cannot be trained now (exclusion aside), or None."""
    turns = rs.session.assistant_turns()
    for turn in turns:
        version = served_version(rs, turn)
        if version is not None and version not in limits.known_versions:
            return "unknown_version"
        if len(turn.prompt_token_ids) + len(turn.completion_token_ids) > limits.max_row_tokens:
            return "too_long"
    if staleness(rs, limits) > limits.max_staleness or age_s(rs, limits.now) > limits.max_staleness_s:
        return "stale"
    if all(turn.sampling.unreproducible() for turn in turns):
        return "unreproducible_sampling"
    return None


@dataclass(frozen=True)
class Row:
    """One assistant turn to train on."""

    session_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float]
    mask: list[bool]  # completion tokens that may carry loss
    advantages: list[float]
    temperature: float
    processed: bool  # behaviour logprobs are of the tempered distribution
    version: str | None  # the adapter version that served it


def _keep(turn: AssistantTurn, spans: tuple[tuple[str, int, int], ...]) -> list[bool]:
    """The completion tokens that may carry loss: none of a turn whose sampling cannot be
    reproduced, none in a masked span."""
    keep = [turn.sampling.unreproducible() is None] * len(turn.completion_token_ids)
    for turn_id, start, end in spans:
        if turn_id == turn.turn_id:
            for t in range(start, min(end, len(keep))):
                keep[t] = False
    return keep


def rows_of(rs: RewardedSession, advantage: float, previous: Trained | None = None) -> list[Row]:
    """Training rows of one session: its assistant turns, with per-token advantages.

    For an amendment, ``previous`` is what was trained and ``advantage`` the revised
    advantage; each token then carries the correction (see the module docstring).
    """
    excluded = is_excluded(rs) is not None
    spans = masked_spans(rs)
    rows = []
    for turn in rs.session.assistant_turns():
        keep = [k and not excluded for k in _keep(turn, spans)]
        adv = [advantage if k else 0.0 for k in keep]
        mask = list(keep)
        if previous is not None:
            old_keep = [k and not previous.excluded for k in _keep(turn, previous.masked)]
            adv = [a - (previous.advantage.value if k else 0.0) for a, k in zip(adv, old_keep, strict=True)]
            mask = [a or b for a, b in zip(keep, old_keep, strict=True)]
        version = served_version(rs, turn)
        rows.append(
            Row(
                session_id=rs.session_id,
                prompt_ids=list(turn.prompt_token_ids),
                completion_ids=list(turn.completion_token_ids),
                behaviour_logprobs=list(turn.behaviour_logprobs),
                mask=mask,
                advantages=adv,
                temperature=turn.sampling.temperature or 1.0,  # a greedy turn carries no loss
                processed=turn.logprobs_mode == LogprobsMode.PROCESSED,
                version=version,
            )
        )
    return rows


def has_signal(rows: list[Row]) -> bool:
    return any(a != 0.0 and m for row in rows for a, m in zip(row.advantages, row.mask, strict=True))


@dataclass(frozen=True)
class Padded:
    """Rows padded into tensors: prompts left-padded to P, completions right-padded to C."""

    prompt_ids_B_P: torch.Tensor
    prompt_mask_B_P: torch.Tensor
    completion_ids_B_C: torch.Tensor
    completion_mask_B_C: torch.Tensor  # real completion tokens
    loss_mask_B_C: torch.Tensor  # action tokens that may carry loss
    advantages_B_C: torch.Tensor
    behaviour_logprobs_B_C: torch.Tensor
    temperature_B: torch.Tensor
    processed_B: torch.Tensor
    versions: list[str | None] = field(default_factory=list)

    def select(self, rows: list[int]) -> Padded:
        """These rows (repeats allowed), in this order."""
        index_R = torch.tensor(rows)
        return Padded(
            prompt_ids_B_P=self.prompt_ids_B_P[index_R],
            prompt_mask_B_P=self.prompt_mask_B_P[index_R],
            completion_ids_B_C=self.completion_ids_B_C[index_R],
            completion_mask_B_C=self.completion_mask_B_C[index_R],
            loss_mask_B_C=self.loss_mask_B_C[index_R],
            advantages_B_C=self.advantages_B_C[index_R],
            behaviour_logprobs_B_C=self.behaviour_logprobs_B_C[index_R],
            temperature_B=self.temperature_B[index_R],
            processed_B=self.processed_B[index_R],
            versions=[self.versions[r] for r in rows],
        )

    @property
    def action_tokens(self) -> int:
        return int(self.loss_mask_B_C.sum())

    @property
    def tokens(self) -> int:
        return int(self.prompt_mask_B_P.sum() + self.completion_mask_B_C.sum())


def collate(rows: list[Row], pad_id: int = 0) -> Padded:
    B = len(rows)
    P = max(len(r.prompt_ids) for r in rows)
    C = max(len(r.completion_ids) for r in rows)
    prompt_ids_B_P = torch.full((B, P), pad_id, dtype=torch.long)
    prompt_mask_B_P = torch.zeros((B, P), dtype=torch.long)
    completion_ids_B_C = torch.full((B, C), pad_id, dtype=torch.long)
    completion_mask_B_C = torch.zeros((B, C), dtype=torch.bool)
    loss_mask_B_C = torch.zeros((B, C), dtype=torch.bool)
    advantages_B_C = torch.zeros((B, C))
    behaviour_B_C = torch.zeros((B, C))
    for b, row in enumerate(rows):
        p, c = len(row.prompt_ids), len(row.completion_ids)
        prompt_ids_B_P[b, P - p :] = torch.tensor(row.prompt_ids)
        prompt_mask_B_P[b, P - p :] = 1
        completion_ids_B_C[b, :c] = torch.tensor(row.completion_ids)
        completion_mask_B_C[b, :c] = True
        loss_mask_B_C[b, :c] = torch.tensor(row.mask, dtype=torch.bool)
        advantages_B_C[b, :c] = torch.tensor(row.advantages)
        behaviour_B_C[b, :c] = torch.tensor(row.behaviour_logprobs)
    return Padded(
        prompt_ids_B_P=prompt_ids_B_P,
        prompt_mask_B_P=prompt_mask_B_P,
        completion_ids_B_C=completion_ids_B_C,
        completion_mask_B_C=completion_mask_B_C,
        loss_mask_B_C=loss_mask_B_C,
        advantages_B_C=advantages_B_C,
        behaviour_logprobs_B_C=behaviour_B_C,
        temperature_B=torch.tensor([r.temperature for r in rows]),
        processed_B=torch.tensor([r.processed for r in rows]),
        versions=[r.version for r in rows],
    )


@dataclass(frozen=True)
class Limits:
    head: str | None  # the version the learner's weights descend from (None: the base model)
    known_versions: frozenset[str]  # versions in the adapter store
    max_staleness: int
    max_row_tokens: int
    max_staleness_s: float = float("inf")  # sessions recorded longer ago than this are stale
    now: float = 0.0  # the clock (seconds since the epoch), passed in
    parents: Mapping[str, str | None] | None = None  # each version's parent; None: one line v1 <- v2 <- ...

    def parent_of(self, version: str) -> str | None:
        if self.parents is not None:
            return self.parents.get(version)
        number = version_number(version)
        return f"v{number - 1}" if number > 1 else None

    @cached_property
    def _head_line(self) -> dict[str | None, int]:
        return ancestry(self.head, self.parent_of)

    def behind(self, version: str | None) -> int:
        """How many versions ``version`` is from the head: the steps between them in the lineage tree.

        A version the head descends from is as many versions behind as there are steps up to it (the
        base model: the head's depth); one on another line (a rejected candidate, a canary rolled
        back) counts its steps to where the lines meet as well. Measured from the head, not from the
        newest published version: after the gate rejects versions and the learner rebases on the
        champion, the champion's traffic is on-policy again, however many versions were published
        since.
        """
        return distance(version, self._head_line, self.parent_of)


@dataclass(frozen=True)
class Outcome:
    """What became of one record: ``trained``, ``amended``, ``no_signal`` or a skip reason."""

    rewarded: RewardedSession
    kind: str
    advantage: Advantage | None = None
    staleness: int | None = None

    def trained(self) -> Trained | None:
        if self.kind not in ("trained", "amended") or self.advantage is None:
            return None
        excluded = is_excluded(self.rewarded) is not None
        return Trained(self.rewarded.revision, self.advantage, masked_spans(self.rewarded), excluded)

    def unreproducible(self) -> dict[str, str]:
        """Turns that carried no loss because their sampling cannot be recomputed, with the reason."""
        turns = self.rewarded.session.assistant_turns()
        return {t.turn_id: why for t in turns if (why := t.sampling.unreproducible())}


@dataclass(frozen=True)
class Plan:
    rows: list[Row]
    outcomes: list[Outcome]  # one per record, in input order
    baselines: Baselines
    train: bool  # the rows carry a signal: take an optimisation step


def _uniform(signals_N: list[dict[str, float]]) -> bool:
    """The sessions differ in nothing but cost: no signal worth an update."""
    values: dict[str, set[float]] = {}
    for item in signals_N:
        for name, value in item.items():
            if name != "cost":
                values.setdefault(name, set()).add(value)
    return all(len(v) <= 1 for v in values.values())


def _uniform_groups(items: list, min_group_size: int) -> set[int]:
    """Indices of the items in task groups (same tenant and task id, at least ``min_group_size``)
    whose sessions differ in nothing but cost."""
    groups: dict[tuple[str, str], list[int]] = {}
    for k, item in enumerate(items):
        if item.task_id is not None:
            groups.setdefault((item.tenant, item.task_id), []).append(k)
    return {
        k
        for members in groups.values()
        if len(members) >= min_group_size and _uniform([items[k].signals for k in members])
        for k in members
    }


def plan(
    batch: list[RewardedSession],
    trained: dict[str, Trained],
    seen: set[tuple[str, int]],
    baselines: Baselines,
    limits: Limits,
    params: AdvantageParams,
    skip_uniform: bool = True,
) -> Plan:
    """Decide, for one micro-batch, what each record contributes and build the training rows."""
    outcomes: list[Outcome | None] = [None] * len(batch)
    fresh: list[int] = []
    amendments: list[tuple[int, Trained]] = []
    for i, item in enumerate(admit(batch, trained, seen)):
        rs = item.rewarded
        reason = item.kind if item.kind not in ("fresh", "amendment") else None
        if reason is None and item.kind == "fresh":
            reason = is_excluded(rs)
        if reason is None:
            reason = check(rs, limits)
        if reason is not None:
            outcomes[i] = Outcome(rs, reason)
        elif item.kind == "fresh":
            fresh.append(i)
        else:
            amendments.append((i, item.previous))

    items = [scored(batch[i]) for i in fresh]
    advantages, baselines = score(items, baselines, params)
    uniform = skip_uniform and len(items) >= 2 and _uniform([item.signals for item in items])
    flat = _uniform_groups(items, params.min_group_size) if skip_uniform and not uniform else set()

    rows: list[Row] = []
    planned: list[tuple[int, str, Advantage]] = []
    for k, (i, adv) in enumerate(zip(fresh, advantages, strict=True)):
        session_rows = rows_of(batch[i], adv.value)
        if not any(m for row in session_rows for m in row.mask):
            outcomes[i] = Outcome(batch[i], "no_action_tokens")
        elif uniform or k in flat:
            outcomes[i] = Outcome(batch[i], "no_signal", adv)
        else:
            rows += session_rows
            planned.append((i, "trained", adv))
    for i, previous in amendments:
        rs = batch[i]
        if is_excluded(rs):
            adv = replace(previous.advantage, value=0.0)
        else:
            adv = amended(previous.advantage, signals(rs), params)
        rows += rows_of(rs, adv.value, previous)
        planned.append((i, "amended", adv))

    train = has_signal(rows)
    for i, kind, adv in planned:
        outcomes[i] = Outcome(batch[i], kind if train else "no_signal", adv, staleness(batch[i], limits))
    return Plan(rows if train else [], [o for o in outcomes if o is not None], baselines, train)
