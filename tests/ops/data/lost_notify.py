"""Run by tests/ops/test_vllm_engine_wait.py in the vLLM venv, with ops/vllm_site on PYTHONPATH: a real
vLLM shared-memory ring with one writer and one reader (a thread), every notification the writer sends
lost. Prints, as JSON, what the blocked reader read and the timeouts of its waits."""

import json
import threading

from vllm.distributed.device_communicators import shm_broadcast

writer = shm_broadcast.MessageQueue(1, 1, max_chunk_bytes=1 << 16, max_chunks=4)
handle = writer.export_handle()
readers = []
joining = threading.Thread(
    target=lambda: readers.append(shm_broadcast.MessageQueue.create_from_handle(handle, 0))
)
joining.start()
joining.join()
ready = threading.Thread(target=readers[0].wait_until_ready)
ready.start()
writer.wait_until_ready()
ready.join()
reader = readers[0]

timeouts, blocked = [], threading.Event()
poll = reader._spin_condition.poller.poll


def recorded_poll(timeout=None):
    timeouts.append(timeout)
    blocked.set()
    return poll(timeout)


reader._spin_condition.poller.poll = recorded_poll
writer._spin_condition.notify = lambda: None  # every notification lost
read = []
consumer = threading.Thread(target=lambda: read.append(reader.dequeue(timeout=60)))
consumer.start()
blocked.wait(timeout=60)  # the reader has found the ring empty and blocks
writer.enqueue({"step": 1})
consumer.join(timeout=60)
print(
    json.dumps(
        {
            "read": read,
            "max_timeout_ms": max(timeouts),
            "patched": hasattr(shm_broadcast, "RATCHET_BUSY_LOOP_S"),
        }
    )
)
