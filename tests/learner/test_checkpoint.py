"""Checkpoints are whole or invisible; the ledger is cut back to the checkpoint that covers it."""

import pytest
import torch

from learner import checkpoint
from learner.checkpoint import LearnerState, Ledger


def tiny_optimizer() -> torch.optim.Optimizer:
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([weight], lr=0.1)
    weight.sum().backward()
    optimizer.step()
    return optimizer


def write_adapter(folder):
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    (folder / "adapter_config.json").write_text("{}")


def test_checkpoints_round_trip_and_old_ones_are_pruned(tmp_path):
    optimizer = tiny_optimizer()
    for n in (1, 2, 3):
        state = LearnerState(checkpoint=n, updates=n, offsets={0: 10 * n, 1: 3}, ledger_bytes=7 * n)
        checkpoint.save(tmp_path, state, write_adapter, optimizer, keep=2)
    latest = checkpoint.latest(tmp_path)
    assert latest.state == LearnerState(checkpoint=3, updates=3, offsets={0: 30, 1: 3}, ledger_bytes=21)
    assert (latest.adapter_dir / "adapter_model.safetensors").read_bytes() == b"weights"
    restored = tiny_optimizer()
    restored.load_state_dict(torch.load(latest.optimizer_path))
    assert torch.equal(
        restored.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"]
    )
    assert sorted(p.name for p in checkpoint.checkpoints_dir(tmp_path).iterdir()) == [
        "ckpt-00000002",
        "ckpt-00000003",
    ]


def test_a_checkpoint_being_written_is_invisible_and_cleaned(tmp_path):
    checkpoint.save(tmp_path, LearnerState(checkpoint=1), write_adapter, tiny_optimizer())
    partial = checkpoint.checkpoints_dir(tmp_path) / ".partial-00000002-999"
    write_adapter(partial / "adapter")
    (partial / "state.json").write_text('{"checkpoint": 2, "trunc')
    assert checkpoint.latest(tmp_path).state.checkpoint == 1
    assert checkpoint.clean_partials(tmp_path) == 1 and not partial.exists()
    assert checkpoint.latest(tmp_path / "elsewhere") is None


def test_ledger_lines_beyond_the_checkpoint_are_cut(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    covered = ledger.append([{"session_id": "a", "offset": 0}, {"session_id": "b", "offset": 1}])
    ledger.append([{"session_id": "c", "offset": 2}])  # written, but the learner died before its checkpoint
    ledger.truncate(covered)
    assert [e["session_id"] for e in ledger.read()] == ["a", "b"]
    assert ledger.append([{"session_id": "c", "offset": 2}]) > covered
    assert [e["session_id"] for e in Ledger(tmp_path / "ledger.jsonl").read()] == ["a", "b", "c"]


def test_a_reader_skips_a_torn_last_line_but_not_a_broken_one_before_it(tmp_path):
    path = tmp_path / "ledger.jsonl"
    assert checkpoint.read_ledger(path) == []  # no learner has written yet
    Ledger(path).append([{"session_id": "a"}, {"session_id": "b"}])
    with path.open("ab") as fh:
        fh.write(b'{"session_id": "c", "outc')  # the learner was killed mid-write
    assert [e["session_id"] for e in checkpoint.read_ledger(path)] == ["a", "b"]
    path.write_bytes(b'{"session_id": "a"}\n{"sess\n{"session_id": "c"}\n')
    with pytest.raises(ValueError):
        checkpoint.read_ledger(path)
