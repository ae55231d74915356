"""What every benchmark shares (ops/bench/__init__.py): a SIGTERM ends a bench through its ``finally``
blocks, so the private stack it started is stopped, not left running."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from ops.stack import REPO

BENCH = textwrap.dedent(
    """
    import sys, time
    from ops.bench import exit_on_sigterm

    exit_on_sigterm(lambda m: print(m, file=sys.stderr, flush=True), "the private stack")
    try:
        print("started", flush=True)
        time.sleep(120)  # the bench's long work; the test signals it as soon as it reads "started"
    finally:
        print("stopped", flush=True)
    """
)


def test_a_terminated_bench_runs_its_finally_blocks():
    proc = subprocess.Popen(
        [sys.executable, "-c", BENCH], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "started"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143
    assert out.strip() == "stopped"
    assert "terminated (SIGTERM): stopping the private stack" in err
