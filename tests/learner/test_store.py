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
