"""The learner's consumer on the real broker: micro-batches count only the records that count."""

from __future__ import annotations

from learner.consumer import RewardedConsumer
from tests.learner.conftest import produce, rewarded


def test_records_that_do_not_count_ride_along_without_filling_the_batch(broker, topic):
    records = [rewarded(f"s{i}", 1.0, version="v1" if i % 3 else None) for i in range(24)]
    produce(broker, topic, [r.to_json() for r in records], key="one")  # one key: one partition, in order
    consumer = RewardedConsumer(broker, topic, f"g-{topic}", {})
    try:

        def counts(value: bytes) -> bool:
            return b'"adapter_version":"v1"' in value  # the base model's sessions do not count

        first = consumer.batch(4, 1 << 30, 30.0, 30.0, lambda _: 1, counts)
        assert sum(counts(c.value) for c in first) == 4 and len(first) == 6  # 2 base sessions carried
        capped = consumer.batch(100, 1 << 30, 5.0, 30.0, lambda _: 1, lambda _: False, max_skipped=5)
        assert len(capped) == 5
        rest = consumer.batch(100, 1 << 30, 3.0, 30.0, lambda _: 1)  # every record counts: up to the wait
        assert [c.offset for c in first + capped + rest] == list(range(24))
    finally:
        consumer.close()
