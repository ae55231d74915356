"""The rewards bench's reading of the bare loop's report (pure: no broker)."""

import pytest

from ops.bench.rewards import bare_cpu_s


def test_the_rewards_bench_reads_the_bare_loops_cpu_time_from_its_output():
    assert bare_cpu_s(b"ready\ncpu 1.250000\n") == 1.25
    assert bare_cpu_s(b"ready\ncpu 1.0\ncpu 2.5\n") == 2.5  # the last report counts
    with pytest.raises(RuntimeError, match="no CPU time"):
        bare_cpu_s(b"ready\n")
    with pytest.raises(RuntimeError, match="no CPU time"):
        bare_cpu_s(b"ready\ncpu\n")
