"""The bench's bare consume→produce loop, in its own process: ``python -m ops.bench._bare_loop
BOOTSTRAP SOURCE TARGET N``. Prints ``ready`` once it owns every partition of SOURCE, then copies N
records to TARGET (same key, same partition), prints ``cpu SECONDS`` (its CPU time from ``ready`` to
the last acknowledgement) and exits.

It is pipelined as the rewards worker is: sends are not awaited batch by batch; every
``rewards_commit_interval_s`` (the worker's setting) it waits for the acknowledgements of what it
sent, then commits its input offsets, as the worker flushes its outbox before it commits. So the
two sides of the bench do the same Kafka work with the same delivery guarantee, and differ only
in what the worker adds: the join, the contract, scoring and its own bookkeeping."""

from __future__ import annotations

import asyncio
import sys
import time

from ingest.brokers import aiokafka_kwargs
from rewards.stream_io import BatchApp
from rewards.worker_settings import StreamSettings


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
        done, ready, pending, cpu_at_ready = 0, False, [], 0.0
        interval_s = StreamSettings().rewards_commit_interval_s
        last_commit = time.monotonic()
        while done < n:
            batch = await consumer.getmany(timeout_ms=100 if not ready else 1000, max_records=2000)
            if (
                not ready
                and len(consumer.assignment()) == len(consumer.partitions_for_topic(source) or ()) > 0
            ):
                ready, cpu_at_ready = True, time.process_time()
                print("ready", flush=True)
            for tp, records in batch.items():
                for record in records:
                    pending.append(
                        await producer.send(target, record.value, key=record.key, partition=tp.partition)
                    )
                done += len(records)
            if pending and (done >= n or time.monotonic() - last_commit >= interval_s):
                await asyncio.gather(*pending)  # acknowledged before the offsets that produced them
                pending = []
                await consumer.commit()
                last_commit = time.monotonic()
        print(f"cpu {time.process_time() - cpu_at_ready:.6f}", flush=True)
    finally:
        await consumer.stop()
        await producer.stop()


if __name__ == "__main__":
    bootstrap, source, target, n = sys.argv[1:5]
    asyncio.run(copy(bootstrap, source, target, int(n)))
