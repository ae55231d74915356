import json

import pytest

from learner.store import AdapterStore, StoreError, TamperedAdapter


def fake_adapter(folder, payload: bytes):
    """Adapter-shaped files; the store hashes bytes and never parses weights."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_model.safetensors").write_bytes(payload)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8}))
    return folder


def test_publish_numbers_versions_and_records_lineage(tmp_path):
    store = AdapterStore(tmp_path / "store")
    v1 = store.publish(
        fake_adapter(tmp_path / "a", b"one"), base_model="m", data_window={"rewarded.v1": {"0": 10}}
    )
    v2 = store.publish(
        fake_adapter(tmp_path / "b", b"two"), base_model="m", parent=v1.version, metrics={"loss": 0.5}
    )
    assert (v1.version, v2.version) == ("v1", "v2")
    assert store.versions() == ["v1", "v2"]
    assert store.latest().manifest.parent == "v1"
    assert store.get("v1").manifest.data_window == {"rewarded.v1": {"0": 10}}
    assert v1.manifest.content_hash != v2.manifest.content_hash
    assert store.verify("v2").manifest.metrics == {"loss": 0.5}


def test_versions_are_read_only_and_tampering_is_detected(tmp_path):
    store = AdapterStore(tmp_path / "store")
    v1 = store.publish(fake_adapter(tmp_path / "a", b"weights"), base_model="m")
    weights = v1.path / "adapter_model.safetensors"
    assert not weights.stat().st_mode & 0o222
    weights.chmod(0o644)
    weights.write_bytes(b"evil")
    with pytest.raises(TamperedAdapter, match="fails its content check"):
        store.verify("v1")


@pytest.mark.parametrize("name", ["../v1", "/etc/passwd", "v1/../../x", "latest", ""])
def test_only_plain_version_names_resolve(tmp_path, name):
    with pytest.raises(StoreError, match="not an adapter version"):
        AdapterStore(tmp_path).path_of(name)


def test_half_written_publish_is_invisible_and_cleaned(tmp_path):
    store = AdapterStore(tmp_path / "store")
    staging = store.root / ".staging-123-456"
    fake_adapter(staging, b"partial")
    assert store.versions() == [] and store.latest() is None
    assert store.clean_staging() == 1
    assert not staging.exists()


def test_zero_adapter_from_the_base_models_header_or_shaped_like_a_version(tmp_path):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from learner.store import zero_adapter

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    rng = np.random.default_rng(0)
    save_file(
        {
            "model.layers.0.self_attn.q_proj.weight": rng.normal(size=(6, 4)).astype(np.float32),
            "model.layers.1.self_attn.q_proj.weight": rng.normal(size=(6, 4)).astype(np.float32),
            "model.layers.0.self_attn.k_proj.weight": rng.normal(size=(2, 4)).astype(np.float32),
        },
        model_dir / "model.safetensors",
    )
    folder = zero_adapter(tmp_path / "zero", model_dir=model_dir)
    weights = load_file(folder / "adapter_model.safetensors")
    prefix = "base_model.model.model.layers.{}.self_attn.q_proj.lora_{}.weight"
    assert {k: v.shape for k, v in weights.items()} == {
        prefix.format(0, "A"): (1, 4),
        prefix.format(0, "B"): (6, 1),
        prefix.format(1, "A"): (1, 4),
        prefix.format(1, "B"): (6, 1),
    }
    assert all(not v.any() for v in weights.values())
    config = json.loads((folder / "adapter_config.json").read_text())
    assert (config["r"], config["target_modules"], config["peft_type"]) == (1, ["q_proj"], "LORA")
    assert zero_adapter(tmp_path / "zero", model_dir=model_dir) == folder  # built once
    assert [p.name for p in (tmp_path / "zero").iterdir()] == [folder.name]  # no staging left

    # shaped like a stored version: its tensors and config, every weight zero
    like = tmp_path / "like"
    like.mkdir()
    save_file({"x.lora_A.weight": np.ones((8, 4), np.float32)}, like / "adapter_model.safetensors")
    (like / "adapter_config.json").write_text(json.dumps({"r": 8}))
    copy = zero_adapter(tmp_path / "zero", like=like)
    assert copy != folder and (copy / "adapter_config.json").read_bytes() == b'{"r": 8}'
    (tensor,) = load_file(copy / "adapter_model.safetensors").values()
    assert tensor.shape == (8, 4) and not tensor.any()
    with pytest.raises(StoreError, match="cannot read the base model's tensors"):
        zero_adapter(tmp_path / "zero", model_dir=tmp_path / "nothing-here")
    (like / "model.safetensors").write_bytes((like / "adapter_model.safetensors").read_bytes())
    with pytest.raises(StoreError, match="no model.layers.N.self_attn.q_proj.weight"):
        zero_adapter(tmp_path / "zero", model_dir=like)
