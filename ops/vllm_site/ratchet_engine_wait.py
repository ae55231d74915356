"""How long vLLM's engine processes poll before they block (imported by this folder's ``sitecustomize``).

vLLM-CPU runs the model in a worker process and schedules in an engine-core process;
they talk through a shared-memory ring (``shm_broadcast.MessageQueue``). A reader that
has read within the last ``busy_loop_s`` (1 s) polls the ring in a ``sched_yield`` loop
instead of blocking on the writer's ZeroMQ notification, so while a replica serves,
the engine core spins for the whole of every model step. On a 2-core machine that
was 0.44 of a core, taken from the learner, the reward worker and the proxy that
share the other core (measured: a one-thread torch loop beside the gate's target
suite ran 157 vs 189 matrix products a second, spinning vs blocking; the suite took
the same time both ways). With ``busy_loop_s`` = 0 a reader blocks at once on the
notification every write sends; a step takes tens of milliseconds, waking a
blocked reader tens of microseconds.

Those notifications are best effort: the writer's PUB socket keeps at most one message
per reader and drops the next one silently while it believes that one undelivered, and
the reader's SUB socket keeps only the latest. vLLM bounds a lost one with a periodic
recheck of the ring (``SHM_READER_RECHECK_INTERVAL_MS``, 5 s), a rare path while readers
spin. A reader that blocks after every read takes that path on every step, and beside
busy processes on 2 cores the engine core and the worker were often both found waiting
for the other, each with a message in its ring: streamed 24-token requests, one at a
time beside two one-thread torch loops, took 82-112 s each with gaps of 5-10 s between
tokens (1.5-1.7 s with vLLM's spinning). With the busy loop patched, the recheck is
``recheck_ms`` (10 ms; the stack's ``vllm_recheck_ms``): the same requests took 1.7 s at the
median, no gap over 0.25 s; an idle reader wakes 100 times a second to read one flag.
"""

from __future__ import annotations

import inspect
import os

RECHECK_MS = 10


def patch(module, busy_loop_s: float, recheck_ms: int = RECHECK_MS) -> None:
    """Make every ``SpinCondition`` of vLLM's ``shm_broadcast`` ``module`` poll ``busy_loop_s`` seconds,
    and its blocked readers recheck their ring every ``recheck_ms`` milliseconds."""
    spin = getattr(module, "SpinCondition", None)
    if (
        spin is None
        or "busy_loop_s" not in inspect.signature(spin.__init__).parameters
        or not isinstance(getattr(module, "SHM_READER_RECHECK_INTERVAL_MS", None), int)
    ):
        raise RuntimeError(
            f"{module.__name__} has no SpinCondition(busy_loop_s=...) or SHM_READER_RECHECK_INTERVAL_MS: "
            "this vLLM is not the one this was written for (set RATCHET_VLLM_BUSY_LOOP_S=-1 to leave it alone)"
        )
    if recheck_ms < 1:
        raise ValueError(f"recheck_ms must be at least 1, got {recheck_ms}")
    init = spin.__init__

    def __init__(self, *args, **kwargs):
        kwargs.pop("busy_loop_s", None)
        init(self, *args, busy_loop_s=busy_loop_s, **kwargs)

    spin.__init__ = __init__
    module.SHM_READER_RECHECK_INTERVAL_MS = recheck_ms  # read by every wait's timeout, at the call
    module.RATCHET_BUSY_LOOP_S = busy_loop_s
    print(
        f"ratchet: engine rings poll {busy_loop_s:g} s before blocking, recheck every {recheck_ms} ms "
        f"(pid {os.getpid()})",
        flush=True,
    )
