"""The serving controller against two real vLLM replicas, the real capture proxy and the real MLflow.

Replica 1 is the shared vLLM, replica 2 a private one (the only one killed). Adapters
are loaded under a name prefix of this module only, and unloaded at the end.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid

import httpx
import pytest

from ingest import topics
from ingest.contract import Session
from learner.store import AdapterStore
from serving import replicas
from serving.controller import Controller
from serving.proxy import create_app
from serving.settings import ControllerSettings, ProxySettings
from serving.vllm_admin import VLLMClient
from tests.serving.conftest import AUTH, TOKENS, Registry, read_record, serving, write_lora_adapter

PROMPTS = ("The sea is", "My favourite number is")  # turn 1 and turn 2 of every load session


def poll(condition, timeout_s: float, what: str, every_s: float = 0.05):
    """The first truthy value of ``condition()`` within the deadline."""
    deadline = time.monotonic() + timeout_s
    tick = threading.Event()
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        tick.wait(every_s)
    raise AssertionError(f"not within {timeout_s:.0f}s: {what}")


@dataclasses.dataclass
class World:
    store: AdapterStore
    registry: Registry
    settings: ControllerSettings
    proxy_url: str
    private: object  # tests.serving.conftest.PrivateReplica
    urls: tuple[str, str]

    def state(self) -> dict:
        return httpx.get(f"{self.proxy_url}/admin/state", timeout=10).json()

    def served_everywhere(self, version: str, timeout_s: float = 180) -> dict:
        """Wait until the proxy routes the alias to ``version`` on every replica, verified; that state."""

        def done():
            state = self.state()
            ok = state["aliases"].get("policy") == version and all(
                r["healthy"] and version in r["versions"] for r in state["replicas"]
            )
            return state if ok and len(state["replicas"]) == 2 else None

        return poll(done, timeout_s, f"policy -> {version} on both replicas")

    def status(self) -> dict:
        return json.loads((self.settings.serving_dir / "status.json").read_text())

    def routes_log(self) -> list[dict]:
        lines = (self.settings.serving_dir / "routes.log").read_text().splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def world(tmp_path_factory, vllm_url, private_replica, mlflow_url, broker, model_dir, served_model):
    root = tmp_path_factory.mktemp("swap")
    store = AdapterStore(root / "store")
    for seed in (1, 2, 3):
        store.publish(write_lora_adapter(model_dir, root / f"adapter-{seed}", seed=seed), served_model)
    prefix = f"swaptest{uuid.uuid4().hex[:6]}"
    registry = Registry(mlflow_url, f"ratchet-policy-test-{uuid.uuid4().hex[:8]}")
    routes = root / "routes.json"
    proxy_settings = ProxySettings(
        kafka_bootstrap=broker, base_model=served_model, adapter_prefix=prefix, routing_file=routes,
        state_dir=root / "proxy", vllm_timeout_s=120, replica_eject_s=5, ingest_tokens=TOKENS,
    )  # fmt: skip
    urls = (vllm_url, private_replica.url)
    stop = threading.Event()
    with serving(create_app(proxy_settings)) as proxy_url:
        settings = ControllerSettings(
            vllm_urls=urls, proxy_urls=(proxy_url,), adapter_store_dir=store.root, model_dir=model_dir,
            mlflow_url=mlflow_url, registered_model=registry.name, base_model=served_model,
            adapter_prefix=prefix, routing_file=routes, state_dir=root / "controller",
            reconcile_interval_s=1.0, retry_failed_s=3.0,
        )  # fmt: skip
        controller = Controller(settings)
        thread = threading.Thread(target=controller.run, args=(stop,), name="controller", daemon=True)
        thread.start()
        try:
            yield World(store, registry, settings, proxy_url, private_replica, urls)
        finally:
            stop.set()
            thread.join(60)
            controller.close()
            for url in urls:  # leave the shared replica as it was
                client = VLLMClient(url)
                for version in replicas.observe(client, prefix).loaded:
                    client.unload_adapter(f"{prefix}-{version}")
                client.close()
            registry.delete()


@dataclasses.dataclass
class Answer:
    session: str
    turn: int
    started: float
    status: int
    version: str | None = None
    served_model: str | None = None
    replica: str | None = None
    generation: int | None = None
    first_logprob: float | None = None
    error: str | None = None


class Load:
    """Concurrent two-turn sessions through the proxy on the alias, each ended after its second turn."""

    def __init__(self, proxy_url: str, workers: int = 3):
        self.proxy_url = proxy_url
        self.answers: list[Answer] = []
        self.ended: list[dict] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(180)

    def _work(self) -> None:
        with httpx.Client(base_url=self.proxy_url, headers=AUTH, timeout=180) as client:
            while not self._stop.is_set():
                sid = f"swap-test-{uuid.uuid4().hex[:12]}"
                for turn, prompt in enumerate(PROMPTS):
                    body = {
                        "model": "policy",
                        "prompt": prompt,
                        "max_tokens": 2,
                        "temperature": 0,
                        "logprobs": 0,
                    }
                    answer = Answer(sid, turn, time.time(), 0)
                    try:
                        resp = client.post("/v1/completions", headers={"X-Ratchet-Session": sid}, json=body)
                    except httpx.HTTPError as exc:
                        answer.error = repr(exc)
                    else:
                        answer.status = resp.status_code
                        if resp.status_code == 200:
                            h = resp.headers
                            answer.version = h["X-Ratchet-Adapter-Version"]
                            answer.served_model = h["X-Ratchet-Served-Model"]
                            answer.replica = h["X-Ratchet-Replica"]
                            answer.generation = int(h["X-Ratchet-Routes-Generation"])
                            answer.first_logprob = resp.json()["choices"][0]["logprobs"]["token_logprobs"][0]
                        else:
                            answer.error = resp.text[:500]
                    with self._lock:
                        self.answers.append(answer)
                    if answer.status != 200:
                        break
                else:
                    end = client.post(f"/v1/sessions/{sid}/end", json={"status": "completed"})
                    with self._lock:
                        self.ended.append({**end.json(), "http": end.status_code})

    def count(self) -> int:
        with self._lock:
            return len(self.answers)

    def more(self, n: int, timeout_s: float = 120, where=lambda a: True) -> None:
        """Wait for ``n`` more answers (that satisfy ``where``)."""
        with self._lock:
            start = sum(1 for a in self.answers if where(a))

        def enough():
            with self._lock:
                return sum(1 for a in self.answers if where(a)) >= start + n

        poll(enough, timeout_s, f"{n} more answers through the proxy")

    def failures(self) -> list[Answer]:
        return [a for a in self.answers if a.status != 200]


def reference_first_tokens(url: str, prefix: str, versions) -> dict[tuple[str, int], float]:
    """Each version's logprob of its greedy first token for each prompt, asked of the replica directly."""
    client = VLLMClient(url)
    try:
        return {
            (v, i): client.complete(f"{prefix}-{v}", p, max_tokens=1).logprobs[0]
            for v in versions
            for i, p in enumerate(PROMPTS)
        }
    finally:
        client.close()


def test_hot_swap_under_load_fails_no_request_and_rollback_restores_the_previous_version(
    world, broker, capsys, monkeypatch
):
    world.registry.promote("v1")
    world.served_everywhere("v1")
    spanning = f"swap-test-{uuid.uuid4().hex[:12]}"  # a session begun on v2 and continued after the rollback
    proxy = httpx.Client(
        base_url=world.proxy_url, headers={"X-Ratchet-Session": spanning, **AUTH}, timeout=120
    )
    body = {"model": "policy", "max_tokens": 2, "temperature": 0}
    with Load(world.proxy_url) as load:
        load.more(6)
        world.registry.promote("v2")
        promoted = world.served_everywhere("v2")["generation"]
        assert proxy.post("/v1/completions", json={**body, "prompt": PROMPTS[0]}).status_code == 200
        load.more(6, where=lambda a: a.generation is not None and a.generation >= promoted)
        world.registry.promote("v1")  # the gate rolls back
        rolled_back = world.served_everywhere("v1")["generation"]
        second = proxy.post("/v1/completions", json={**body, "prompt": PROMPTS[1]})
        assert second.status_code == 200 and second.headers["X-Ratchet-Adapter-Version"] == "v2"
        load.more(6, where=lambda a: a.generation is not None and a.generation >= rolled_back)
    ended = proxy.post(f"/v1/sessions/{spanning}/end", json={"status": "completed"}).json()
    proxy.close()

    answers = load.answers
    assert load.failures() == [], load.failures()[:5]
    assert load.ended and [e for e in load.ended if e["http"] != 200] == []
    prefix = world.settings.adapter_prefix
    by_version = {v: [a for a in answers if a.version == v] for v in ("v1", "v2")}
    assert len(by_version["v1"]) + len(by_version["v2"]) == len(answers)  # nothing else served
    assert by_version["v1"] and by_version["v2"]
    assert all(a.served_model == f"{prefix}-{a.version}" for a in answers)  # vLLM's own word
    assert {a.replica for a in answers} == set(world.urls)
    # Each answer's first-token logprob is that of its version, and not of the other one.
    reference = reference_first_tokens(world.urls[0], prefix, ("v1", "v2"))
    for i in range(len(PROMPTS)):
        assert abs(reference["v1", i] - reference["v2", i]) > 0.02  # the two versions are distinguishable
    for a in answers:
        other = "v2" if a.version == "v1" else "v1"
        assert abs(a.first_logprob - reference[a.version, a.turn]) < 5e-3, a
        assert abs(a.first_logprob - reference[other, a.turn]) > 5e-3, a
    # A session stays on the version it started with, and each turn records it.
    sessions: dict[str, set] = {}
    for a in answers:
        sessions.setdefault(a.session, set()).add(a.version)
    assert all(len(v) == 1 for v in sessions.values())
    assert all(a.version == "v1" for a in answers if a.turn == 0 and a.generation >= rolled_back)
    record = read_record(broker, Session, topics.SESSIONS, ended["partition"], ended["offset"])
    assert record.policy.adapter_version == "v2"
    assert [t.adapter_version for t in record.assistant_turns()] == ["v2", "v2"]

    # The rollback restored v1 everywhere; v2 stays loaded for the next rollback (retention 2).
    from ops.cli import main

    for key, value in {
        "RATCHET_VLLM_URLS": ",".join(world.urls),
        "RATCHET_ADAPTER_PREFIX": prefix,
        "RATCHET_ROUTING_FILE": str(world.settings.routes_path),
        "RATCHET_STATE_DIR": str(world.settings.state_dir),
    }.items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    assert main(["serving", "status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["routed_version"] == "v1" and report["champion"] == "v1"
    assert [(r["replica"], r["healthy"], r["serves_alias"]) for r in report["replicas"]] == [
        (url, True, True) for url in world.urls
    ]
    assert all(
        {"v1", "v2"} <= set(r["loaded"]) and {"v1", "v2"} <= set(r["routed"]) for r in report["replicas"]
    )
    assert main(["serving", "status"]) == 0
    assert "policy -> v1" in capsys.readouterr().out


def test_a_tampered_adapter_is_refused_and_the_current_version_keeps_serving(world):
    world.registry.promote("v1")
    world.served_everywhere("v1")
    weights = world.store.path_of("v3") / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # one bit of one weight: still a loadable file
    weights.chmod(0o644)
    weights.write_bytes(bytes(data))
    try:
        world.registry.promote("v3")

        def refused_everywhere():
            status = world.status()
            reasons = [r["failures"].get("v3", "") for r in status["replicas"]]
            return status if all("fails its content check" in r for r in reasons) else None

        status = poll(refused_everywhere, 60, "v3 refused on both replicas")
        assert status["champion"] == "v3" and status["alias"] == {"policy": "v1"}
        assert any("champion v3 is not served yet" in p for p in status["problems"])
        prefix = world.settings.adapter_prefix
        for url in world.urls:
            assert "v3" not in replicas.observe(VLLMClient(url), prefix).loaded
        resp = httpx.post(
            f"{world.proxy_url}/v1/completions",
            headers={"X-Ratchet-Session": f"swap-test-{uuid.uuid4().hex[:12]}", **AUTH},
            json={"model": "policy", "prompt": PROMPTS[0], "max_tokens": 2},
            timeout=120,
        )
        assert resp.status_code == 200 and resp.headers["X-Ratchet-Adapter-Version"] == "v1"
    finally:
        world.registry.promote("v1")


def test_a_killed_replica_is_avoided_and_restored_by_the_controller(world):
    world.registry.promote("v1")
    world.served_everywhere("v1")
    private = world.private.url
    with Load(world.proxy_url) as load:
        load.more(4)
        killed_at = time.time()
        world.private.kill()

        def avoided():
            return any(r["url"] == private and not r["healthy"] for r in world.state()["replicas"])

        poll(
            avoided, world.settings.reconcile_interval_s + 30, "the controller marks the killed replica down"
        )
        world.private.restart()  # returns once it answers again, with no adapters
        healthy_at = time.monotonic()
        restored = world.served_everywhere("v1", timeout_s=world.settings.reconcile_interval_s + 60)[
            "generation"
        ]
        restore_s = time.monotonic() - healthy_at
        print(f"replica restored {restore_s:.1f}s after it answered again (generation {restored})")
        load.more(2, where=lambda a: a.replica == private and a.started > killed_at)

    assert load.failures() == [], load.failures()[:5]
    # Routing avoided the replica from the kill until the controller had restored and verified v1 there.
    log = [g for g in world.routes_log() if g["at"] > killed_at]
    first_restored = min(
        g["generation"] for g in log for r in g["replicas"] if r["url"] == private and "v1" in r["versions"]
    )
    assert any(not r["healthy"] for g in log for r in g["replicas"] if r["url"] == private)
    after_kill = [a for a in load.answers if a.replica == private and a.started > killed_at]
    assert after_kill and all(a.generation >= first_restored for a in after_kill)
    # It holds again what it held before: the served version and the previous one (retention 2).
    assert {"v1", "v2"} <= replicas.observe(VLLMClient(private), world.settings.adapter_prefix).loaded
