"""The bench's bare consume→produce loop, in its own process: ``python -m ops.bench._bare_loop
BOOTSTRAP SOURCE TARGET N``. Prints ``ready`` once it owns every partition of SOURCE, then copies N
records to TARGET (same key, same partition), committing per fetched batch, and exits."""

from __future__ import annotations

import asyncio
import sys

from ingest.brokers import aiokafka_kwargs
from rewards.stream_io import BatchApp


async def copy(bootstrap: str, source: str, target: str, n: int) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer = AIOKafkaConsumer(
        source,
        **aiokafka_kwargs(bootstrap),
        group_id="bench-raw",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        fetch_max_wait_ms=BatchApp.fetch_max_wait_ms,  # the rewards worker's long-poll
    )
    producer = AIOKafkaProducer(**aiokafka_kwargs(bootstrap), acks="all", linger_ms=2)
    await consumer.start()
    await producer.start()
    try:
        done, ready = 0, False
        while done < n:
            batch = await consumer.getmany(timeout_ms=100 if not ready else 1000, max_records=2000)
            if (
                not ready
                and len(consumer.assignment()) == len(consumer.partitions_for_topic(source) or ()) > 0
            ):
                ready = True
                print("ready", flush=True)
            sends = []
            for tp, records in batch.items():
                for record in records:
                    sends.append(
                        await producer.send(target, record.value, key=record.key, partition=tp.partition)
                    )
                done += len(records)
            await asyncio.gather(*sends)
            if batch:
                await consumer.commit()
    finally:
        await consumer.stop()
        await producer.stop()


if __name__ == "__main__":
    bootstrap, source, target, n = sys.argv[1:5]
    asyncio.run(copy(bootstrap, source, target, int(n)))
