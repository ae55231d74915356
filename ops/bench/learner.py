"""Learner throughput: the full learner step vs a bare peft loop on identical batches.

``python -m ops.bench learner --json FILE``. Both run in one process on the same
micro-batch of rewarded sessions served by an older adapter version (so the
full step recomputes π_train(v_old) and the base model's logits): the full step
is plan → collate → reference forward → policy forward/backward through prompt
and completion (shared prompts once), exact KL → AdamW → atomic checkpoint; the
bare loop is one forward over prompt + completion with gradient, −A·log p over
the completion, backward, gradient clipping and AdamW.
They alternate, so load on the machine hits both alike. Tokens are prompt +
completion tokens. JSON: ``tokens_per_s``, ``bare_tokens_per_s``, ``ratio``,
``peak_rss_mb`` (the process after the learner's warm-up step, before the bare
loop runs), ``peak_rss_with_bare_mb`` and the batch shape.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch


def bare_step(model, optimizer, params, batch, grad_clip: float) -> None:
    ids_B_S = torch.cat([batch.prompt_ids_B_P, batch.completion_ids_B_C], dim=1)
    mask_B_S = torch.cat([batch.prompt_mask_B_P, batch.completion_mask_B_C.long()], dim=1)
    P = batch.prompt_ids_B_P.shape[1]
    logits_B_S_V = model(
        input_ids=ids_B_S, attention_mask=mask_B_S, position_ids=(mask_B_S.cumsum(1) - 1).clamp(min=0)
    ).logits
    logprobs_B_C_V = torch.log_softmax(logits_B_S_V[:, P - 1 : -1].float(), dim=-1)
    logprobs_B_C = logprobs_B_C_V.gather(-1, batch.completion_ids_B_C[..., None])[..., 0]
    mask_B_C = batch.loss_mask_B_C
    loss = -(batch.advantages_B_C * logprobs_B_C * mask_B_C).sum() / mask_B_C.sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench learner", description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--sessions", type=int, default=8, help="sessions per micro-batch")
    parser.add_argument("--prompt-tokens", type=int, default=160)
    parser.add_argument("--completion-tokens", type=int, default=48)
    parser.add_argument(
        "--steps", type=int, default=4, help="measured steps of each kind (after one warm-up)"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)

    from ingest.contract import AssistantTurn, PolicyRef, RewardedSession, Session
    from learner import checkpoint
    from learner.batching import Limits, collate, plan
    from learner.checkpoint import LearnerState
    from learner.settings import load_settings
    from learner.store import AdapterStore
    from learner.trainer import POLICY_ADAPTER, Trainer, load_policy
    from ops.model import prepare_model
    from ops.stack import load_settings as stack_settings

    if args.threads:
        torch.set_num_threads(args.threads)
    settings = load_settings()
    if settings.model_dir is None:
        settings = load_settings(model_dir=prepare_model(stack_settings().cache_dir))
    work = Path(tempfile.mkdtemp(prefix="ratchet-bench-learner-"))
    settings = load_settings(
        model_dir=settings.model_dir, adapter_store_dir=work / "store", learner_state_dir=work / "state"
    )
    store = AdapterStore(settings.adapter_store_dir)
    model = load_policy(settings)
    with torch.no_grad():  # an older version that served the sessions: a non-trivial adapter
        for name, p in model.named_parameters():
            if p.requires_grad and "lora_B" in name:
                p.normal_(0.0, 0.01)
    model.save_pretrained(work / "v1", selected_adapters=[POLICY_ADAPTER])
    store.publish(work / "v1", settings.base_model)
    trainer = Trainer(model, store, settings)

    rng = random.Random(0)
    sessions = []
    for i in range(args.sessions):
        prompt = [rng.randrange(1, 49_000) for _ in range(args.prompt_tokens)]
        completion = [rng.randrange(1, 49_000) for _ in range(args.completion_tokens)]
        turn = AssistantTurn(turn_id="a0", prompt_token_ids=prompt, completion_token_ids=completion,
                             behaviour_logprobs=[-1.0] * len(completion), adapter_version="v1")  # fmt: skip
        session = Session(session_id=f"b{i}", tenant="bench", task_id="bench-1", status="completed", turns=[turn],
                          policy=PolicyRef(base_model=settings.base_model, adapter_version="v1"))  # fmt: skip
        sessions.append(
            RewardedSession(session_id=f"b{i}", tenant="bench", session=session, reward=float(i % 2))
        )
    limits = Limits("v1", frozenset(store.versions()), settings.max_staleness, settings.max_row_tokens)
    # behaviour logprobs as vLLM would have returned them: π(v1) itself
    old_B_C, *_ = trainer.reference(
        collate(plan(sessions, {}, set(), {}, limits, settings.advantage_params()).rows), False
    )
    sessions = [
        s.model_copy(update={"session": s.session.model_copy(update={"turns": [
            s.session.turns[0].model_copy(update={"behaviour_logprobs": old_B_C[b].tolist()})]})})
        for b, s in enumerate(sessions)
    ]  # fmt: skip
    state = LearnerState()

    def full_step() -> int:
        batch_plan = plan(sessions, {}, set(), {}, limits, settings.advantage_params())
        batch = collate(batch_plan.rows)
        trainer.step(batch, settings.objective_params())
        state.checkpoint += 1
        checkpoint.save(settings.learner_state_dir, state, trainer.save_adapter, trainer.optimizer)
        return batch.tokens

    bare_batch = collate(plan(sessions, {}, set(), {}, limits, settings.advantage_params()).rows)
    bare_optimizer = torch.optim.AdamW(trainer.params, lr=settings.learning_rate)

    def bare() -> int:
        bare_step(model, bare_optimizer, trainer.params, bare_batch, settings.grad_clip)
        return bare_batch.tokens

    def peak_rss_mb() -> float:
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    full_step()  # warm-up, and the learner's own peak before the bare loop ever runs
    learner_peak = peak_rss_mb()
    bare()
    totals = {"full": [0, 0.0], "bare": [0, 0.0]}
    for _ in range(args.steps):
        for name, fn in (("full", full_step), ("bare", bare)):
            start = time.perf_counter()
            tokens = fn()
            totals[name][0] += tokens
            totals[name][1] += time.perf_counter() - start
            print(
                f"{name}: {tokens} tokens in {time.perf_counter() - start:.2f}s", file=sys.stderr, flush=True
            )
    full_tps = totals["full"][0] / totals["full"][1]
    bare_tps = totals["bare"][0] / totals["bare"][1]
    result = {
        "tokens_per_s": round(full_tps, 2),
        "bare_tokens_per_s": round(bare_tps, 2),
        "ratio": round(full_tps / bare_tps, 3),
        "peak_rss_mb": learner_peak,
        "peak_rss_with_bare_mb": peak_rss_mb(),
        "sessions": args.sessions,
        "prompt_tokens": args.prompt_tokens,
        "completion_tokens": args.completion_tokens,
        "steps": args.steps,
        "threads": torch.get_num_threads(),
        "lora_rank": settings.lora_rank,
        "lora_targets": list(settings.lora_targets),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
