"""The process supervisor with small real processes: start, health, stop, and what it never kills."""

import contextlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from ops import supervisor as supervisor_module
from ops.supervisor import (
    Component,
    StackError,
    Supervisor,
    _ephemeral_ports,
    free_port,
    http_ok,
    start_ticks,
)


def web_server(name: str = "web") -> Component:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    return Component(name, argv, url, port, health=lambda: http_ok(url), start_timeout_s=30)


@pytest.fixture
def supervisor(tmp_path):
    said: list[str] = []
    sup = Supervisor(tmp_path / "state", "127.0.0.1", said.append)
    sup.said = said
    yield sup
    sup.stop_all([])


def test_a_started_component_is_healthy_left_alone_when_up_and_stopped_with_its_group(supervisor):
    web = web_server()
    supervisor.start(web)
    pid = supervisor.report(web)["pid"]
    assert supervisor.report(web) | {"pid": None} == {
        "component": "web",
        "pid": None,
        "state": "up",
        "healthy": True,
        "url": web.url,
        "log": str(supervisor.log_path("web")),
    }
    supervisor.start(web)  # healthy: nothing restarted
    assert (
        supervisor.report(web)["pid"] == pid
        and f"web: already up at {web.url} (pid {pid})" in supervisor.said
    )
    assert " starting: " in supervisor.log_path("web").read_text()

    assert supervisor.stop("web") and not supervisor.alive("web")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert supervisor.report(web)["state"] == "down" and not supervisor.stop("web")


def test_a_pid_file_whose_process_is_not_the_one_started_is_dropped_never_killed(supervisor):
    me = psutil.Process()
    record = {"pid": me.pid, "create_time": me.create_time() - 10, "url": "", "argv": []}  # a reused pid
    (supervisor.state_dir / "run" / "stale.pid").write_text(json.dumps(record))
    assert not supervisor.alive("stale") and not supervisor.stop("stale")
    assert psutil.pid_exists(os.getpid()) and not (supervisor.state_dir / "run" / "stale.pid").exists()


def test_a_clock_adjustment_does_not_orphan_a_running_component(supervisor):
    """The wall-clock start time of a process is boot time + ticks, and the boot time is read from the
    clock: adjusted by a second it no longer matches the PID file, which once left a component
    running after its stop. The start in ticks since boot decides."""
    supervisor.start(web_server())
    pidfile = supervisor.state_dir / "run" / "web.pid"
    record = json.loads(pidfile.read_text())
    assert record["start_ticks"] == start_ticks(record["pid"]) is not None
    record["create_time"] += 1.0  # what a clock adjustment makes of it
    pidfile.write_text(json.dumps(record))
    pid = record["pid"]
    assert supervisor.alive("web") and supervisor.stop("web")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_reused_pid_with_the_recorded_wall_clock_time_is_still_not_ours(supervisor):
    me = psutil.Process()
    record = {"pid": me.pid, "create_time": me.create_time(), "start_ticks": start_ticks(me.pid) + 1}
    (supervisor.state_dir / "run" / "reused.pid").write_text(json.dumps({**record, "url": "", "argv": []}))
    assert not supervisor.alive("reused") and not supervisor.stop("reused")
    assert psutil.pid_exists(os.getpid())


def test_a_port_taken_by_another_process_is_refused(supervisor):
    squatter = web_server("squatter")
    supervisor.start(squatter)
    stranger = Supervisor(supervisor.state_dir / "other", "127.0.0.1", lambda m: None)
    twin = Component("twin", squatter.argv, squatter.url, squatter.port, squatter.health)
    with pytest.raises(StackError, match=f"twin: port {squatter.port} on 127.0.0.1 is taken"):
        stranger.start(twin)


def test_free_ports_are_never_handed_out_twice_in_one_process():
    # a port handed out stays unbound until its server starts (a minute for vLLM): the test
    # session's stack and the private replica once drew the same one. 1000 draws from the
    # ephemeral range repeat a port almost surely unless free_port remembers what it gave.
    ports = [free_port() for _ in range(1000)]
    assert len(set(ports)) == len(ports)


def test_a_component_that_exits_while_starting_fails_with_its_last_log_lines(supervisor):
    argv = [sys.executable, "-c", "print('no config here', flush=True); raise SystemExit(3)"]
    broken = Component("broken", argv, "http://127.0.0.1:1", None, health=lambda: False)
    with pytest.raises(
        StackError, match="broken exited during start-up; last log lines:\n(.|\n)*no config here"
    ):
        supervisor.start(broken)
    assert not supervisor.alive("broken")


def test_stop_all_stops_unknown_pid_files_first_then_the_known_in_reverse_start_order(supervisor):
    first, second, extra = web_server("first"), web_server("second"), web_server("extra")
    for comp in (first, second, extra):
        supervisor.start(comp)
    supervisor.said.clear()
    supervisor.stop_all(["first", "second", "absent"])
    assert supervisor.said == ["extra: stopped", "absent: not running", "second: stopped", "first: stopped"]


def test_set_up_runs_only_before_a_spawn_and_other_settings_are_reported(supervisor):
    web = web_server()
    calls = []
    web.before_start = lambda: calls.append("set up")
    supervisor.start(web)
    supervisor.start(web)  # healthy: not spawned, not set up again
    assert calls == ["set up"]
    pid = supervisor.report(web)["pid"]

    changed = Component("web", [*web.argv, "--directory", "."], web.url, web.port, web.health)
    supervisor.said.clear()
    supervisor.start(changed)  # left running, with a warning that it runs with other settings
    assert supervisor.report(web)["pid"] == pid
    assert "runs with other settings than the current ones" in supervisor.said[-1]
    assert "stop it and start it again" in supervisor.said[-1]


def test_a_stop_from_another_process_does_not_wait_for_the_starter_to_reap(supervisor):
    """The process that started a component (`ratchet up` in a long-lived process, a test) is its
    parent: once stopped it stays a zombie until that parent reaps it, which a stop from another
    process (`ratchet down`) must not wait out."""
    supervisor.start(web_server())
    pid = supervisor._owned_process("web").pid
    code = (
        "import sys, time; from pathlib import Path; from ops.supervisor import Supervisor; "
        "t = time.monotonic(); "
        "assert Supervisor(Path(sys.argv[1]), '127.0.0.1', print).stop('web', timeout_s=60); "
        "print(time.monotonic() - t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(supervisor.state_dir)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[-1]) < 30  # a wait for the zombie lasts the whole 60 s
    assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # ours to reap, and still unreaped


def test_a_component_started_nice_runs_nicer_than_the_stack_and_so_do_its_children(supervisor):
    """vLLM's replicas run niced when the stack says so; its engine process, started later, too."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # the server starts a child of its own before it listens, as vLLM starts its engine
    child = "import time; time.sleep(600)"
    code = (
        "import http.server, subprocess, sys; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}]); "
        f"http.server.test(http.server.SimpleHTTPRequestHandler, port={port}, bind='127.0.0.1')"
    )
    comp = Component("niced", [sys.executable, "-c", code], url, port, health=lambda: http_ok(url),
                     start_timeout_s=30, nice=7)  # fmt: skip
    supervisor.start(comp)
    proc = psutil.Process(supervisor.report(comp)["pid"])
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert proc.nice() == min(19, mine + 7)
    children = proc.children()
    assert children and all(c.nice() == proc.nice() for c in children)
    autogroup = Path(f"/proc/{proc.pid}/autogroup")
    if autogroup.exists():  # the kernel schedules sessions as groups: the session's group is niced
        assert autogroup.read_text().split()[-1] == "7"
    assert supervisor.stop("niced")


def test_free_ports_lie_below_the_ephemeral_range_outgoing_connections_draw_from():
    # a stack's ports are chosen minutes before its servers bind them; one from the ephemeral
    # range was once taken in between by an outgoing connection of the stack's own processes.
    low, _ = _ephemeral_ports()
    ports = [free_port() for _ in range(200)]
    assert all(1024 <= port < low for port in ports), [p for p in ports if p >= low]


def test_a_port_something_listens_on_is_never_handed_out(monkeypatch):
    # narrow the draw to 1000 ports and listen on every other one: a draw without the bind
    # check would hand out a taken port within a few tries.
    low, _ = _ephemeral_ports()
    monkeypatch.setattr(supervisor_module, "_FIRST_PRIVATE_PORT", low - 1000)
    listening = []
    try:
        for port in range(low - 1000, low, 2):
            sock = socket.socket()
            listening.append(sock)
            with contextlib.suppress(OSError):  # already taken by something else: fine too
                sock.bind(("127.0.0.1", port))
                sock.listen()
        ports = [free_port() for _ in range(100)]
        assert all(low - 1000 <= port < low for port in ports)
        for port in ports:  # each was free when handed out, and nothing else listens on it
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))
    finally:
        for sock in listening:
            sock.close()
