"""The trainer on SmolLM2 (CPU): exact logprobs per adapter version, and real learning."""

import dataclasses
import uuid

import pytest
import torch

from learner.batching import Limits, collate, plan, rows_of
from learner.logprobs import completion_logprobs
from learner.settings import LearnerSettings
from learner.store import AdapterStore
from learner.trainer import POLICY_ADAPTER, Trainer, load_policy
from tests.learner.conftest import rewarded


@pytest.fixture
def settings(model_dir, single_thread) -> LearnerSettings:
    return LearnerSettings(
        model_dir=model_dir,
        lora_rank=8,
        lora_alpha=16,
        lora_targets=("q_proj", "v_proj"),
        kl_row_fraction=1.0,
    )


def perturb(model, scale: float, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)


def test_logprobs_match_a_plain_forward_for_every_adapter_version(settings, tmp_path):
    model = load_policy(settings)
    perturb(model, 0.02, seed=1)
    store = AdapterStore(tmp_path / "store")
    model.save_pretrained(tmp_path / "v1", selected_adapters=[POLICY_ADAPTER])
    store.publish(tmp_path / "v1", "smollm2")
    perturb(model, 0.02, seed=2)  # θ moves on from v1
    trainer = Trainer(model, store, settings)

    sessions = [
        rewarded("a", 1.0, prompt=[1, 9690, 198, 2683, 359], completion=[504, 314, 28, 2], version="v1"),
        rewarded("b", 1.0, prompt=[1], completion=[9690, 198, 17], temperature=0.7, logprobs_mode="raw"),
        rewarded("c", 1.0, prompt=list(range(100, 109)), completion=[11, 12], temperature=1.3, version="v1"),
        # the same prompts again (a task's group): served by the same and by another version
        rewarded("d", 0.0, prompt=[1, 9690, 198, 2683, 359], completion=[13, 14, 15], version="v1"),
        rewarded("e", 0.5, prompt=[1, 9690, 198, 2683, 359], completion=[504, 16]),
        rewarded("f", 0.5, prompt=list(range(100, 109)), completion=[17], temperature=1.3, version="v1"),
    ]
    rows = [r for s in sessions for r in rows_of(s, 1.0)]
    batch = collate(rows)
    matched_B_C, base_N_V, _, _ = trainer.reference(batch, with_base=True)
    policy_B_C = trainer.policy_logprobs(batch, grad=False)

    def expected(adapter: str | None, row, temperature: float) -> torch.Tensor:
        with torch.no_grad():
            if adapter is None:
                with model.disable_adapter():
                    return completion_logprobs(model, row.prompt_ids, row.completion_ids, temperature)
            model.set_adapter(adapter)
            try:
                return completion_logprobs(model, row.prompt_ids, row.completion_ids, temperature)
            finally:
                model.set_adapter(POLICY_ADAPTER)

    def base_logits(row) -> torch.Tensor:
        with torch.no_grad(), model.disable_adapter():
            logits_S_V = model(input_ids=torch.tensor([row.prompt_ids + row.completion_ids])).logits[0]
        start = len(row.prompt_ids) - 1
        return logits_S_V[start : start + len(row.completion_ids)]

    assert torch.allclose(base_N_V, torch.cat([base_logits(row) for row in rows]), atol=1e-4)
    for b, row in enumerate(rows):
        n = len(row.completion_ids)
        old = expected(row.version, row, row.temperature)
        assert torch.allclose(policy_B_C[b, :n], expected(POLICY_ADAPTER, row, row.temperature), atol=1e-4)
        matched = old if row.processed else expected(row.version, row, 1.0)
        assert torch.allclose(matched_B_C[b, :n], matched, atol=1e-4)
    assert not torch.allclose(matched_B_C[0, :4], policy_B_C[0, :4], atol=1e-3)  # v1 and θ really differ
    tempered_1 = expected(rows[1].version, rows[1], rows[1].temperature)
    assert not torch.allclose(matched_B_C[1, :3], tempered_1, atol=1e-3)  # raw vs tempered

    v1_before = {n: p.detach().clone() for n, p in model.named_parameters() if ".v1." in n}
    trainer.step(batch, settings.objective_params())
    assert all(torch.equal(p, v1_before[n]) for n, p in model.named_parameters() if ".v1." in n)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        n for n, _ in model.named_parameters() if f".{POLICY_ADAPTER}." in n
    }


def test_rewarding_a_phrase_raises_its_probability(settings, tmp_path):
    """Sessions rewarded 1 exactly when the completion says "welcome"; each round is served by the
    version published after the previous update, as in production."""
    from transformers import AutoTokenizer

    settings = dataclasses.replace(settings, learning_rate=2e-3)
    tokenizer = AutoTokenizer.from_pretrained(settings.model_dir)
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    chat = [{"role": "user", "content": "Thanks for the help!"}]
    prompt = encode(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False))
    texts = [
        "You're welcome!", "You're welcome, happy to help.", "Oh, you're welcome.", "You're welcome, anytime.",
        "No problem!", "Happy to help.", "Anytime!", "Glad I could help.",
    ]  # fmt: skip
    completions = [encode(t) + [tokenizer.eos_token_id] for t in texts]
    probe = rows_of(rewarded("probe", 1.0, prompt=prompt, completion=encode("You're welcome")), 1.0)

    store = AdapterStore(tmp_path / "store")
    trainer = Trainer(load_policy(settings), store, settings)

    def phrase_logprob() -> float:
        return trainer.policy_logprobs(collate(probe), grad=False)[0].sum().item()

    def other_replies_logprob() -> float:
        """Mean log p of the replies without the phrase."""
        rows = [
            r for c in completions[4:] for r in rows_of(rewarded("o", 0.0, prompt=prompt, completion=c), 0.0)
        ]
        batch = collate(rows)
        return (trainer.policy_logprobs(batch, grad=False) * batch.completion_mask_B_C).sum(1).mean().item()

    before, others_before = phrase_logprob(), other_replies_logprob()
    version = None
    for update in range(3):
        served = [rewarded(f"x{i}", 0.0, prompt=prompt, completion=c) for i, c in enumerate(completions)]
        behaviour_B_C = trainer.policy_logprobs(
            collate([r for s in served for r in rows_of(s, 0.0)]), grad=False
        )
        sessions = [
            rewarded(
                f"u{update}-{i}",
                1.0 if "welcome" in text else 0.0,
                task_id=f"thanks-{update}",
                prompt=prompt,
                completion=c,
                behaviour=behaviour_B_C[i, : len(c)].tolist(),
                version=version,
            )
            for i, (text, c) in enumerate(zip(texts, completions, strict=True))
        ]
        batch = plan(
            sessions,
            {},
            set(),
            {},
            Limits(version, frozenset(store.versions()), 4, 4096),
            settings.advantage_params(),
        )
        assert batch.train
        metrics = trainer.step(collate(batch.rows), settings.objective_params())
        assert metrics["mismatch_masked_fraction"] == 0.0  # behaviour and π_train(v_old) agree
        trainer.save_adapter(tmp_path / f"update-{update}")
        version = store.publish(tmp_path / f"update-{update}", "smollm2", parent=version).version
    after, others_after = phrase_logprob(), other_replies_logprob()
    assert after - before >= 0.5, f"log p(phrase) went from {before:.3f} to {after:.3f}"
    assert others_after - others_before <= -0.3, (
        f"log p(other replies) went from {others_before:.3f} to {others_after:.3f}"
    )


def test_vllm_processed_logprobs_match_the_trainer_at_the_sampling_temperature(settings, tmp_path, vllm_url):
    """Sample through a store version on the real vLLM at temperature 0.7: π_train(v_old) recomputed by
    the trainer matches the behaviour logprobs, so no token is mismatch-masked."""
    from serving.vllm_admin import VLLMClient

    model = load_policy(settings)
    perturb(model, 0.02, seed=4)
    store = AdapterStore(tmp_path / "store")
    model.save_pretrained(tmp_path / "v1", selected_adapters=[POLICY_ADAPTER])
    v1 = store.publish(tmp_path / "v1", "smollm2")
    perturb(model, 0.0, seed=5)  # θ is back at the base model: only the store version explains the samples
    client = VLLMClient(vllm_url)
    name = f"learner-test-{uuid.uuid4().hex[:8]}"
    client.load_adapter(name, v1.path)
    try:
        prompt = [1, 9690, 198, 2683, 359, 260, 1345, 314, 28]
        completion = client.complete(name, prompt, max_tokens=12, temperature=0.7)
    finally:
        client.unload_adapter(name)
        client.close()
    rs = rewarded(
        "vllm",
        1.0,
        prompt=prompt,
        completion=completion.token_ids,
        behaviour=completion.logprobs,
        version="v1",
        temperature=0.7,
    )
    batch = collate(rows_of(rs, 1.0))
    matched_B_C, _, _, _ = Trainer(model, store, settings).reference(batch, with_base=False)
    gap = (matched_B_C[0] - torch.tensor(completion.logprobs)).abs().max().item()
    assert gap < 1e-3, f"vLLM vs trainer logprob gap {gap}"
    untempered = completion_logprobs(model, prompt, completion.token_ids, 1.0)  # θ = base here, at T = 1
    assert (untempered - torch.tensor(completion.logprobs)).abs().max().item() > 1e-2


def test_the_epochs_of_a_micro_batch_share_one_proximal_policy(settings, tmp_path):
    """The proximal policy is the parameters before a micro-batch's first epoch: two epochs differ
    from two single-epoch steps, whose every ratio is 1 at its start."""
    settings = dataclasses.replace(settings, learning_rate=0.02)
    store = AdapterStore(tmp_path / "store")
    prompt = [1, 9690, 198, 2683, 359]
    model = load_policy(settings)
    sessions = []
    for i in range(4):
        completion = [504, 314 + i, 28, 2]
        with torch.no_grad(), model.disable_adapter():
            behaviour = completion_logprobs(model, prompt, completion, 1.0).tolist()
        sessions.append(
            rewarded(f"s{i}", float(i % 2), prompt=prompt, completion=completion, behaviour=behaviour)
        )
    rows = [r for i, s in enumerate(sessions) for r in rows_of(s, 1.0 if i % 2 else -1.0)]
    batch = collate(rows)
    trainer = Trainer(model, store, settings)
    first = trainer.step(batch, settings.objective_params())
    second = trainer.step(batch, settings.objective_params())
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert second["ratio_mean"] == pytest.approx(1.0, abs=1e-6)  # a new step, a new proximal policy

    epochs = dataclasses.replace(settings, epochs_per_batch=2)
    once = load_policy(epochs)
    last_epoch = Trainer(once, store, epochs).step(batch, epochs.objective_params())
    assert abs(last_epoch["ratio_mean"] - 1.0) > 1e-4  # measured against the first epoch's start
    assert first["clip_fraction"] == second["clip_fraction"] == 0.0
    assert last_epoch["clip_fraction"] > 0.0  # so the trust region binds across the epochs, not per step


def full_forward_loss(model, rows, params, base_model_logits, proximal_B_C, kl_weight_B=None) -> torch.Tensor:
    """The same objective from a plain forward of each row (prompt + completion, no padding, no cache);
    ``kl_weight_B``: each row's weight in the KL anchor (None: 1)."""
    from learner.objective import TokenTensors, exact_kl, objective

    batch = collate(rows)
    B, C = batch.completion_ids_B_C.shape
    logprobs_B_C = torch.zeros(B, C, dtype=torch.float64)
    kl_B_C = torch.zeros(B, C, dtype=torch.float64)
    for b, row in enumerate(rows):
        ids = torch.tensor([row.prompt_ids + row.completion_ids])
        start, n = len(row.prompt_ids) - 1, len(row.completion_ids)
        logits_T_V = model(input_ids=ids).logits[0, start : start + n]
        tempered_T_V = torch.log_softmax(logits_T_V / row.temperature, dim=-1)
        picked_T = tempered_T_V.gather(-1, torch.tensor(row.completion_ids)[:, None])[:, 0]
        logprobs_B_C = logprobs_B_C.index_put((torch.tensor([b]), torch.arange(n)), picked_T)
        kl_T = exact_kl(logits_T_V, base_model_logits(row), torch.full((n,), row.temperature))
        if kl_weight_B is not None:
            kl_T = kl_T * float(kl_weight_B[b])
        kl_B_C = kl_B_C.index_put((torch.tensor([b]), torch.arange(n)), kl_T)
    tokens = TokenTensors(
        logprobs_B_T=logprobs_B_C,
        proximal_logprobs_B_T=proximal_B_C,
        old_matched_logprobs_B_T=batch.behaviour_logprobs_B_C,
        behaviour_logprobs_B_T=batch.behaviour_logprobs_B_C,
        kl_B_T=kl_B_C,
        advantages_B_T=batch.advantages_B_C,
        mask_B_T=batch.loss_mask_B_C,
    )
    return objective(tokens, params)[0]


@pytest.mark.parametrize("kl_row_fraction", [1.0, 0.5])
def test_parameter_gradients_equal_a_plain_full_forward(model_dir, single_thread, tmp_path, kl_row_fraction):
    """Gradients of the learner's loss (shared prompts run once, with gradient, through the KV cache;
    rows padded) equal those of a plain forward of every row, with LoRA on keys, values and the MLP,
    for two-turn conversations, a task's group sharing a prompt and a row sharing nothing; with the
    KL anchor on every row, and on the rows it draws (half of those served by a version, weighted 2)."""
    settings = LearnerSettings(
        model_dir=model_dir,
        lora_rank=4,
        lora_alpha=8,
        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        kl_row_fraction=kl_row_fraction,
    )
    model = load_policy(settings).double()  # float64: what is compared is the maths, not rounding
    perturb(model, 0.02, seed=7)  # a non-zero B: the adapter changes the prompt's keys and values
    store = AdapterStore(tmp_path / "store")
    model.save_pretrained(tmp_path / "v", selected_adapters=[POLICY_ADAPTER])
    served = store.publish(tmp_path / "v", "smollm2").version
    trainer = Trainer(model, store, settings)
    turn_1 = ([1, 9690, 198, 2683, 359], [504, 314, 28])
    turn_2 = (turn_1[0] + turn_1[1] + [2, 198, 1345], [260, 17, 2])  # the first turn is its prompt
    group = [1, 9690, 198, 28, 905]
    # a second conversation on turn 1's prompt: its turn 2 shares turn 1's prompt and the start of
    # the first conversation's answer; and a row that shares nothing (its prompt runs whole)
    other_2 = (turn_1[0] + [504, 314, 17, 2, 198], [260, 2])
    specs = [
        (turn_1, 1.0, 0.7),
        (turn_2, 1.0, 0.7),
        (other_2, -1.0, 0.7),
        (([7, 3458, 28], [11, 2]), 0.5, 1.0),
        ((group, [11, 12, 13, 14]), -0.5, 1.0),
        ((group, [11, 15]), 1.5, 1.0),
        ((group, [16]), 0.5, 1.0),
    ]
    rows = []
    for i, ((prompt, completion), advantage, temperature) in enumerate(specs):
        with torch.no_grad():
            behaviour = completion_logprobs(model, prompt, completion, temperature).tolist()
        session = rewarded(
            f"g{i}", 1.0, prompt=prompt, completion=completion, behaviour=behaviour, temperature=temperature,
            version=served if i in (1, 2, 4, 5) else None,
        )  # fmt: skip
        rows += rows_of(session, advantage)
    assert [r.temperature for r in rows] == [t for _, _, t in specs]
    params = dataclasses.replace(settings.objective_params(), kl_coef=0.5)
    batch = collate(rows)

    _, base_N_V, _, kl_weight_B = trainer.reference(batch, with_base=True)
    by_version = kl_weight_B[[1, 2, 4, 5]]
    assert kl_weight_B[[0, 3, 6]].tolist() == [1.0, 1.0, 1.0]  # served by the base model: always
    if kl_row_fraction == 1.0:
        assert by_version.tolist() == [1.0] * 4
    else:
        assert sorted(by_version.tolist()) == [0.0, 0.0, 2.0, 2.0]
    # every row runs under the version that served it (7), and under the base model only if drawn
    assert trainer.reference_rows == 7 + int((by_version > 0).sum())
    # the same constants on both sides (π_prox = μ: weight 1, ratio e^{log π_θ − log μ})
    behaviour_B_C = batch.behaviour_logprobs_B_C
    loss, _, _ = trainer.loss(batch, params, behaviour_B_C, base_N_V, behaviour_B_C, kl_weight_B=kl_weight_B)
    loss.backward()
    cached = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad(set_to_none=True)

    def base_model_logits(row) -> torch.Tensor:
        with torch.no_grad(), model.disable_adapter():
            logits = model(input_ids=torch.tensor([row.prompt_ids + row.completion_ids])).logits[0]
        start = len(row.prompt_ids) - 1
        return logits[start : start + len(row.completion_ids)]

    plain = full_forward_loss(model, rows, params, base_model_logits, behaviour_B_C, kl_weight_B)
    assert plain.item() == pytest.approx(loss.item(), rel=1e-5)
    plain.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    flat_cached = torch.cat([cached[n].flatten() for n in sorted(cached)])
    flat_plain = torch.cat([dict(model.named_parameters())[n].grad.flatten() for n in sorted(cached)])
    assert flat_plain.norm() > 0
    relative = ((flat_cached - flat_plain).norm() / flat_plain.norm()).item()
    assert relative < 1e-5, f"relative gradient difference {relative:.2e}"
    # the prompt matters: LoRA of k_proj gets gradient from prompt positions, so dropping it changes them
    k_names = [n for n in sorted(cached) if "k_proj.lora_A" in n]
    assert any(cached[n].abs().sum() > 0 for n in k_names)


def test_rows_sampled_by_the_current_weights_reuse_the_proximal_forward(settings, tmp_path):
    """A version the trainable adapter still equals needs no reference forward: the step is the one
    a trainer that runs it computes (same loss, ratios and resulting weights), with fewer rows run,
    and a step later the version is an old one again."""
    settings = dataclasses.replace(settings, learning_rate=0.01)
    store = AdapterStore(tmp_path / "store")
    model = load_policy(settings)
    perturb(model, 0.02, seed=3)
    model.save_pretrained(tmp_path / "v", selected_adapters=[POLICY_ADAPTER])
    version = store.publish(tmp_path / "v", "smollm2").version
    prompt = [1, 9690, 198, 2683, 359]
    sessions = []
    for i in range(4):
        completion = [504, 314 + i, 28, 2]
        with torch.no_grad():
            behaviour = (completion_logprobs(model, prompt, completion, 0.7) + 0.01 * i).tolist()
        sessions.append(
            rewarded(
                f"s{i}",
                float(i % 2),
                prompt=prompt,
                completion=completion,
                behaviour=behaviour,
                temperature=0.7,
                version=version,
            )  # fmt: skip
        )
    sessions.append(rewarded("raw", 1.0, prompt=prompt, completion=[504, 2], temperature=0.7,
                             logprobs_mode="raw", version=version))  # fmt: skip
    batch = collate([r for i, s in enumerate(sessions) for r in rows_of(s, 1.0 if i % 2 else -1.0)])
    params = dataclasses.replace(settings.objective_params(), kl_coef=0.1)

    def step(reuse: bool) -> tuple[Trainer, dict[str, float]]:
        trainer = Trainer(load_policy(settings, store.verify(version).path), store, settings)
        trainer.weights_are = version if reuse else None
        # plain SGD: the weights move by lr x gradient (AdamW's first step is lr x its sign)
        trainer.optimizer = torch.optim.SGD(trainer.params, lr=1.0)
        return trainer, trainer.step(batch, params)

    reusing, fast = step(reuse=True)
    running, full = step(reuse=False)
    assert fast["reference_rows"] == full["reference_rows"] - 4  # the raw-mode row is still run
    for key in ("loss", "ratio_mean", "clip_fraction", "mismatch_masked_fraction", "kl"):
        assert fast[key] == pytest.approx(full[key], rel=1e-4, abs=1e-6), key
    after = {n: p for n, p in reusing.model.named_parameters() if p.requires_grad}
    for name, p in running.model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(after[name], p, rtol=1e-4, atol=1e-6)
    before = {n: p for n, p in model.named_parameters() if p.requires_grad}
    moved = max(float((after[n] - before[n]).detach().abs().max()) for n in after)
    assert moved > 1e-3  # the step moved them
    assert reusing.weights_are is None
    assert reusing.step(batch, params)["reference_rows"] == full["reference_rows"]


def test_a_step_back_propagated_in_chunks_equals_one_over_the_whole_batch(settings, tmp_path):
    """Chunks (for memory) change neither the gradient nor the reported loss components: rows of
    two tasks and a two-turn conversation, served by a stored version and by the base model."""
    store = AdapterStore(tmp_path / "store")
    model = load_policy(settings)
    perturb(model, 0.02, seed=5)
    model.save_pretrained(tmp_path / "v", selected_adapters=[POLICY_ADAPTER])
    version = store.publish(tmp_path / "v", "smollm2").version
    first = ([1, 9690, 198, 2683, 359], [504, 314, 28])
    specs = [
        (first, version), ((first[0] + first[1] + [2, 198, 1345], [260, 17, 2]), version),
        (([1, 9690, 198, 28, 905], [11, 12, 13, 14]), None), (([1, 9690, 198, 28, 905], [11, 15]), version),
        (([1, 9690, 198, 28, 905], [16]), None), (([7, 3458, 28], [11, 2]), version),
    ]  # fmt: skip
    rows = []
    for i, ((prompt, completion), served_by) in enumerate(specs):
        with torch.no_grad():
            behaviour = (completion_logprobs(model, prompt, completion, 0.8) - 0.05 * i).tolist()
        session = rewarded(f"c{i}", 1.0, prompt=prompt, completion=completion, behaviour=behaviour,
                           temperature=0.8, version=served_by)  # fmt: skip
        rows += rows_of(session, [1.0, -0.5, 0.7, -1.2, 0.3, 0.9][i])
    batch = collate(rows)
    params = dataclasses.replace(settings.objective_params(), kl_coef=0.3)

    def step(chunk_tokens: int) -> tuple[Trainer, dict[str, float]]:
        chunked = dataclasses.replace(settings, grad_chunk_tokens=chunk_tokens)
        trainer = Trainer(load_policy(chunked, store.verify(version).path), store, chunked)
        trainer.optimizer = torch.optim.SGD(trainer.params, lr=1.0)  # weights move by the gradient
        return trainer, trainer.step(batch, params)

    whole, once = step(0)
    parts, chunked = step(12)
    assert once["chunks"] == 1 and chunked["chunks"] >= 3
    for key in ("loss", "surrogate", "kl", "ratio_mean", "mismatch_masked_fraction", "weight_mean"):
        assert chunked[key] == pytest.approx(once[key], rel=1e-4, abs=1e-7), key  # float32 sums
    assert chunked["reference_rows"] == once["reference_rows"]
    start = dict(model.named_parameters())
    names = sorted(n for n, p in whole.model.named_parameters() if p.requires_grad)

    def delta(trainer: Trainer) -> torch.Tensor:
        now = dict(trainer.model.named_parameters())
        return torch.cat([(now[n] - start[n]).detach().flatten() for n in names])

    moved = delta(whole)
    assert moved.norm() > 1e-3
    assert ((delta(parts) - moved).norm() / moved.norm()).item() < 1e-4  # float32 sums in another order


def test_chunks_keep_rows_sharing_a_head_together_within_the_budget(settings, tmp_path):
    trainer = Trainer(load_policy(settings), AdapterStore(tmp_path / "store"),
                      dataclasses.replace(settings, grad_chunk_tokens=40))  # fmt: skip
    task_a, task_b = list(range(100, 120)), list(range(200, 220))
    sessions = [rewarded(f"a{i}", 1.0, prompt=task_a, completion=[5, 6, 7]) for i in range(3)]
    sessions += [rewarded(f"b{i}", 1.0, prompt=task_b, completion=[5, 6, 7]) for i in range(3)]
    batch = collate([r for s in sessions for r in rows_of(s, 1.0)])
    # each task: its head once (19) + 3 x (last prompt token + 3 completion tokens) = 31 positions
    assert trainer.chunks(batch) == [[0, 1, 2], [3, 4, 5]]


def test_kl_rows_are_drawn_evenly_and_weighted_to_an_unbiased_total():
    """Of the rows served by a version, ceil(fraction x n) are drawn, each weighing n / that, so the
    weights sum to n in every micro-batch; over many micro-batches every row is drawn about as often;
    the draw is a function of the batch (a restarted learner draws the same rows) and base rows weigh 1."""
    from learner.trainer import kl_row_weights

    versions = ["v3", None, "v3", "v2", "v3", None, "v2"]  # 5 rows served by a version
    draws = torch.zeros(len(versions))
    for seed in range(400):
        g = torch.Generator().manual_seed(seed)
        rows = [
            rows_of(rewarded(f"k{seed}-{b}", 1.0, prompt=[1, 2, 3],
                             completion=torch.randint(10, 900, (3,), generator=g).tolist(), version=v), 1.0)[0]
            for b, v in enumerate(versions)
        ]  # fmt: skip
        batch = collate(rows)
        weights = kl_row_weights(batch, 0.25)
        assert torch.equal(weights, kl_row_weights(batch, 0.25))
        assert weights[[1, 5]].tolist() == [1.0, 1.0]
        drawn = weights[[0, 2, 3, 4, 6]]
        assert sorted(drawn.tolist()) == [0.0, 0.0, 0.0, 2.5, 2.5]  # ceil(0.25 x 5) = 2 rows, 5/2 each
        draws[[0, 2, 3, 4, 6]] += (drawn > 0).float()
        assert kl_row_weights(batch, 1.0).tolist() == [1.0] * len(versions)
    # each of the 5 is drawn with probability 2/5: 160 of 400 expected, sd ~9.8
    assert all(120 <= int(draws[b]) <= 200 for b in (0, 2, 3, 4, 6)), draws.tolist()
    with pytest.raises(ValueError, match="kl_row_fraction"):
        LearnerSettings(kl_row_fraction=0.0)
