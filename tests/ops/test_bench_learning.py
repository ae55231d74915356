"""The learning benchmark's pure parts: interval maths, report assembly, arguments, the shared task order."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gating.heldout import bootstrap_interval, estimate
from ops.bench._bare_rl import task_stream
from ops.bench.learning import QUICK, LearningConfig, parse_args
from ops.bench.learning_report import Point, Scored, arm_entry, assemble, paired_gain, pick
from ops.simulator import Simulator, SimulatorSettings


def test_bootstrap_interval_brackets_the_mean_and_is_reproducible():
    values = [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    low, high = bootstrap_interval(values, seed=3)
    assert low < 0.6 < high
    assert low > 0.2 and high < 0.95
    assert bootstrap_interval(values, seed=3) == (low, high)


def test_bootstrap_interval_narrows_with_more_tasks():
    few = bootstrap_interval([0.0, 1.0] * 5)
    many = bootstrap_interval([0.0, 1.0] * 200)
    assert many[1] - many[0] < (few[1] - few[0]) / 3


def test_bootstrap_interval_of_constant_and_empty_values():
    assert bootstrap_interval([0.5] * 7) == (0.5, 0.5)
    low, high = bootstrap_interval([])
    assert math.isnan(low) and math.isnan(high)


def test_estimate_reports_mean_interval_and_task_count():
    est = estimate({"a": 1.0, "b": 0.0, "c": 0.5, "d": 0.5})
    assert est["mean"] == 0.5
    assert est["tasks"] == 4
    assert est["ci95"][0] <= 0.5 <= est["ci95"][1]


def test_paired_gain_uses_only_tasks_scored_for_both():
    final = {"a": 1.0, "b": 1.0, "c": 0.0}
    base = {"a": 0.0, "b": 1.0, "z": 1.0}
    gain = paired_gain(final, base)
    assert gain["tasks"] == 2
    assert gain["mean"] == 0.5


def test_arm_entry_divides_the_paired_gain_by_the_budget():
    base = Scored({f"t{i}": 0.0 if i < 6 else 1.0 for i in range(10)})
    final = Scored({f"t{i}": 0.0 if i < 3 else 1.0 for i in range(10)})
    entry = arm_entry(0, 15.0, versions=4, sessions=300, base=base, final=final, samples=500)
    assert entry["heldout_base"]["pass_at_1"] == 0.4
    assert entry["heldout_final"]["pass_at_1"] == 0.7
    assert entry["gain"]["pass_at_1"] == pytest.approx(0.3)
    assert entry["gain_per_min"] == pytest.approx(0.02)
    assert entry["versions"] == 4 and entry["sessions"] == 300 and entry["minutes"] == 15.0
    assert "hack_rate" not in entry["heldout_final"]


def test_arm_entry_reports_hack_rate_for_the_honeypot():
    tasks = ["a", "b", "c", "d"]
    base = Scored(dict.fromkeys(tasks, 0.5), dict.fromkeys(tasks, 0.0))
    final = Scored(dict.fromkeys(tasks, 0.5), {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0})
    entry = arm_entry(1, 2.0, 1, 10, base, final, samples=500)
    assert entry["heldout_base"]["hack_rate"] == 0.0
    assert entry["heldout_final"]["hack_rate"] == 0.25
    assert entry["gain_per_min"] == 0.0


def _entry(gain_per_min: float | None) -> dict:
    return {"gain_per_min": gain_per_min}


def test_assemble_ratio_is_the_mean_over_seeds_of_each_arm():
    arms = {"ratchet": [_entry(0.02), _entry(0.04)], "bare": [_entry(0.04), _entry(0.02)]}
    report = assemble(arms, LearningConfig(seeds=2), {"sha": "abc", "dirty": False}, 12.0)
    assert report["gain_per_min"] == 0.03
    assert report["bare_gain_per_min"] == 0.03
    assert report["ratio"] == 1.0
    assert report["seeds"] == [0, 1]
    assert report["commit"]["sha"] == "abc"
    assert report["config"]["suite"] == "target"


def test_assemble_leaves_the_ratio_undefined_when_the_bare_loop_gained_nothing():
    arms = {"ratchet": [_entry(0.02)], "bare": [_entry(-0.01)]}
    report = assemble(arms, LearningConfig(seeds=1), {}, 1.0)
    assert report["ratio"] is None
    assert "bare loop gained nothing" in report["ratio_note"]


def test_assemble_with_one_arm_has_no_ratio():
    report = assemble({"ratchet": [_entry(0.02)]}, LearningConfig(seeds=1, arms=("ratchet",)), {}, 1.0)
    assert report["bare_gain_per_min"] is None
    assert report["ratio"] is None
    assert "ratio_note" not in report


def test_runs_of_different_arms_combine_into_one_report_only_when_comparable():
    from ops.bench.learning_report import combine

    sha = {"sha": "abc", "dirty": False}
    ratchet = assemble(
        {"ratchet": [_entry(0.05), _entry(0.03)]}, LearningConfig(seeds=2, arms=("ratchet",)), sha, 10.0
    )
    bare = assemble({"bare": [_entry(0.02), _entry(0.02)]}, LearningConfig(seeds=2, arms=("bare",)), sha, 5.0)
    both = combine([json.loads(json.dumps(ratchet, default=str)), json.loads(json.dumps(bare, default=str))])
    assert both["ratio"] == 2.0 and both["gain_per_min"] == 0.04 and both["bare_gain_per_min"] == 0.02
    assert both["config"]["arms"] == ["ratchet", "bare"] and both["wall_s"] == 15.0
    assert both["arms"]["bare"] == bare["arms"]["bare"]

    other = assemble(bare["arms"], LearningConfig(seeds=2, arms=("bare",), minutes=8.0), sha, 5.0)
    with pytest.raises(ValueError, match="differ in minutes"):
        combine([ratchet, other])
    with pytest.raises(ValueError, match="one clean commit"):
        combine(
            [
                ratchet,
                assemble(
                    bare["arms"], LearningConfig(seeds=2, arms=("bare",)), {"sha": "def", "dirty": False}, 5.0
                ),
            ]
        )
    with pytest.raises(ValueError, match="one clean commit"):
        combine(
            [
                ratchet,
                assemble(bare["arms"], LearningConfig(seeds=2, arms=("bare",)), sha | {"dirty": True}, 5.0),
            ]
        )
    with pytest.raises(ValueError, match="more than one run"):
        combine([ratchet, ratchet])


def test_combine_from_the_command_line_says_why_it_refuses(tmp_path, capsys):
    from ops.bench.learning import main

    sha = {"sha": "abc", "dirty": False}
    one = tmp_path / "one.json"
    one.write_text(
        json.dumps(assemble({"bare": [_entry(0.02)]}, LearningConfig(seeds=1, arms=("bare",)), sha, 5.0))
    )
    assert main(["--combine", str(one), str(one)]) == 2
    assert "arm 'bare' is in more than one run" in capsys.readouterr().err
    assert main(["--combine", str(one), str(tmp_path / "missing.json")]) == 2


def test_parse_args_full_defaults():
    config, args = parse_args(["--json", "out.json"])
    assert (config.seeds, config.minutes, config.eval_tasks, config.prompts_per_round) == (3, 15.0, 48, 8)
    assert config.arms == ("ratchet", "bare")
    assert config.family == "calculator" and config.suite == "target"
    assert config.detectors is True
    assert str(args.json) == "out.json"


def test_parse_args_quick_sizes_and_explicit_flags_win():
    config, _ = parse_args(["--quick"])
    assert config.seeds == QUICK["seeds"] and config.minutes == QUICK["minutes"]
    assert config.eval_tasks == QUICK["eval_tasks"] and config.eval_samples == QUICK["eval_samples"]
    config, _ = parse_args(["--quick", "--minutes", "4", "--seeds", "2"])
    assert (config.minutes, config.seeds, config.eval_tasks) == (4.0, 2, QUICK["eval_tasks"])


def test_parse_args_arm_family_detectors_and_negative_weight():
    config, _ = parse_args(
        ["--arm", "bare", "--family", "honeypot", "--detectors", "off", "--negative-weight", "0"]
    )
    assert config.arms == ("bare",)
    assert config.suite == "honeypot"
    assert config.detectors is False
    assert config.negative_weight == 0.0


@pytest.mark.parametrize(
    "argv",
    [
        ["--seeds", "0"],
        ["--minutes", "0"],
        ["--eval-tasks", "-1"],
        ["--arm", "gate"],
        ["--family", "x"],
        ["--advantage-std-floor", "0"],
    ],
)
def test_parse_args_refuses_bad_values(argv):
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_learner_env_carries_the_recipe_and_the_negative_weight():
    env = LearningConfig(prompts_per_round=8, group_size=4, negative_weight=0.0).learner_env(seed=2)
    assert env["RATCHET_NEGATIVE_ADVANTAGE_WEIGHT"] == "0.0"
    assert env["RATCHET_BATCH_SESSIONS"] == "32"
    assert env["RATCHET_LORA_SEED"] == "2"
    assert env["RATCHET_LORA_TARGETS"] == "q_proj,k_proj,v_proj,o_proj"
    assert env["RATCHET_PUBLISH_EVERY_UPDATES"] == "1"
    assert all(key.startswith("RATCHET_") for key in env)
    assert "RATCHET_KL_COEF" not in env  # the learner's own default
    config, _ = parse_args(["--kl-coef", "0"])
    assert config.learner_env(seed=0)["RATCHET_KL_COEF"] == "0.0"


@pytest.mark.parametrize(
    "argv, trained",
    [([], "16"), (["--quick"], "2"), (["--min-trained", "0"], "0"), (["--min-trained", "24"], "24")],
)
def test_the_micro_batch_fills_to_half_its_size_of_trained_sessions_unless_told(argv, trained):
    config, _ = parse_args(argv)
    assert config.learner_env(seed=0)["RATCHET_BATCH_MIN_TRAINED"] == trained


@pytest.mark.parametrize("argv, floor", [([], 0.1), (["--advantage-std-floor", "1"], 1.0)])
def test_the_advantage_floor_reaches_the_learner_as_its_setting(argv, floor, monkeypatch):
    from learner.advantages import AdvantageParams
    from learner.settings import load_settings

    assert AdvantageParams.std_floor == 0.1  # the learner's default, which the benchmark keeps
    config, _ = parse_args(argv)
    env = config.learner_env(seed=0)
    assert ("RATCHET_ADVANTAGE_STD_FLOOR" in env) == bool(argv)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert load_settings().advantage_params().std_floor == floor


@pytest.mark.parametrize("family", ["calculator", "honeypot"])
def test_bare_loop_draws_the_simulators_tasks_in_the_simulators_order(family):
    sim = Simulator(SimulatorSettings(sim_mix={family: "1"}, sim_seed=5, sim_group_size=4))
    expected = [t.task_id for _ in range(6) for t in sim._next_group()]
    stream = task_stream(family, seed=5, group_size=4)
    assert [next(stream).task_id for _ in range(24)] == expected
    assert len(set(expected)) == 6


def _points(n: int) -> list[Point]:
    return [Point(float(i), f"v{i}", Path(f"/store/v{i}")) for i in range(1, n + 1)]


def test_pick_keeps_the_final_point_and_spaces_the_intermediate_ones():
    assert [p.label for p in pick(_points(9), 0)] == ["v9"]
    assert [p.label for p in pick(_points(9), 1)] == ["v5", "v9"]
    assert [p.label for p in pick(_points(9), 3)] == ["v2", "v5", "v7", "v9"]
    assert [p.label for p in pick(_points(3), 5)] == ["v1", "v2", "v3"]
    assert pick([], 2) == []
    assert [p.label for p in pick(_points(1), 2)] == ["v1"]


def _tiny_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def _own_logprobs(model, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    import torch

    with torch.no_grad():
        logits_S_V = model(input_ids=torch.tensor([prompt + completion])).logits[0]
    logprobs_C_V = torch.log_softmax(logits_S_V[len(prompt) - 1 : -1] / temperature, dim=-1)
    return logprobs_C_V.gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


def test_bare_group_loss_pushes_up_the_better_sample_and_down_the_worse():
    import torch

    from gating.tasks import sample_tasks
    from ops.bench._bare_rl import BareConfig, Group, group_loss

    model = _tiny_model()
    cfg = BareConfig(Path("."), "", "", "calculator", 0, 1.0, temperature=0.7)
    prompt, completions = [1, 2, 3, 4], [[5, 6, 7], [8, 9], [10, 11, 12], [13]]
    group = Group(
        sample_tasks("calculator", 1, seed=0)[0],
        prompt,
        completions,
        [_own_logprobs(model, prompt, c, cfg.temperature) for c in completions],
        [1.0, 0.0, 0.0, 0.0],
    )
    tokens = sum(len(c) for c in completions)
    loss = group_loss(model, group, cfg, tokens)
    # ratio 1 (behaviour = current policy): the surrogate is the advantage itself, per token
    advantages = [0.75, -0.25, -0.25, -0.25]
    expected = -sum(a * len(c) for a, c in zip(advantages, completions, strict=True)) / tokens
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    before = [sum(_own_logprobs(model, prompt, c, cfg.temperature)) for c in completions]
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.05 * p.grad
    after = [sum(_own_logprobs(model, prompt, c, cfg.temperature)) for c in completions]
    assert after[0] > before[0]
    assert sum(after[1:]) < sum(before[1:])


def test_bare_group_loss_of_a_uniform_group_is_none():
    from gating.tasks import sample_tasks
    from ops.bench._bare_rl import BareConfig, Group, group_loss

    cfg = BareConfig(Path("."), "", "", "calculator", 0, 1.0)
    group = Group(sample_tasks("calculator", 1, seed=0)[0], [1, 2], [[3], [4]], [[-1.0], [-1.0]], [1.0, 1.0])
    assert group_loss(_tiny_model(), group, cfg, 2) is None


def test_learner_env_names_only_settings_a_stage_reads():
    from ops.config_reference import check_environment

    assert check_environment(LearningConfig().learner_env(seed=0)) == []


def test_the_benchs_promotions_are_signed_as_the_serving_controller_checks_them():
    from ops.bench._ratchet_arm import promotion_tags
    from serving.champion import check_version

    key, other = b"k" * 32, b"o" * 32
    tags = {"adapter_version": "v3", **promotion_tags(key, "bench-m", "7", "v3", "sha256:abc")}
    assert check_version(key, "bench-m", "7", tags, "sha256:abc") is None
    assert check_version(other, "bench-m", "7", tags, "sha256:abc").code == "bad_signature"
    assert check_version(key, "bench-m", "8", tags, "sha256:abc").code == "bad_signature"  # another version
    assert check_version(key, "bench-m", "7", tags, "sha256:abd").code == "bad_signature"  # other content
