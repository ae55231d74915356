"""Supervised processes: each with a PID file, a log and its own process group under one state folder.

:class:`Supervisor` knows nothing of what it runs: a :class:`Component` names
its command, its address and how to tell it is healthy. ``start`` leaves a
healthy component alone, spawns one that is not running, and waits for its
health; a start that writes nothing to its log for ``silent_timeout_s`` is
stuck: its threads are dumped to its log and it is started again, up to
``start_attempts``. ``stop`` stops only a process whose PID file this folder
holds, and checks the process start time, so a recycled PID is never killed.
The recipes of the local stack's components are in :mod:`ops.stack`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

Progress = Callable[[str], None]

# Every supervised process runs with telemetry and model downloads off.
QUIET_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "GX_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
}

REPO = Path(__file__).resolve().parent.parent


class StackError(RuntimeError):
    pass


class StuckStart(StackError):
    """A component wrote nothing to its log for its silent_timeout_s while starting."""


def _nice_autogroup(pid: int, nice: int) -> None:
    """Where the kernel groups processes by session for scheduling (autogroup), a process's
    niceness weighs only against its own session's: each component is a session of its own, so
    the session's group is niced too (no autogroup: nothing to do)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(f"{min(19, nice)}\n")


@dataclasses.dataclass
class Component:
    name: str
    argv: list[str]
    url: str
    port: int | None  # None: a worker that listens on no port of its own
    health: Callable[[], bool]
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    start_timeout_s: float = 60.0
    before_start: Callable[[], None] | None = None  # before it is spawned (one-time set-up, say)
    after_start: Callable[[], None] | None = None
    # A start that writes nothing to its log for this long is stuck: its threads are dumped to the log
    # (Python components run with PYTHONFAULTHANDLER=1) and it is started again, up to start_attempts.
    silent_timeout_s: float | None = None
    start_attempts: int = 1
    nice: int = 0  # its CPU niceness (and its children's), 0: as the stack's own


# --- health probes -------------------------------------------------------------


_HANDED_OUT: set[int] = set()
_HANDING_OUT = threading.Lock()
_FIRST_PRIVATE_PORT = 20000  # above the ports services commonly listen on by default
_PORT_DRAW = random.Random()  # seeded from the OS: two processes draw different sequences


def _ephemeral_ports() -> tuple[int, int]:
    """The range the kernel draws outgoing connections' local ports from."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now and that this process has not handed out before (for
    private stacks, benchmarks and tests). A port handed out stays free until its server binds it,
    which for vLLM takes a minute: two private stacks of one process must not get the same one.

    The port is drawn below the kernel's ephemeral range: a port from that range (what binding
    to port 0 returns) can be taken, in the minutes before its server starts, by any outgoing
    connection of the stack's own processes."""
    low, _ = _ephemeral_ports()
    candidates = range(_FIRST_PRIVATE_PORT, low) if low - _FIRST_PRIVATE_PORT >= 1000 else None
    with _HANDING_OUT:
        for _ in range(1000):
            wanted = 0 if candidates is None else _PORT_DRAW.choice(candidates)
            port = _bindable(host, wanted)
            if port and port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise OSError(f"no free port on {host} that this process has not handed out already")


def _bindable(host: str, port: int) -> int:
    """The port bound (0 lets the kernel choose), or 0 if it is taken."""
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return 0
        return sock.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def describe_processes(procs: list[psutil.Process]) -> str:
    """One line per process: pid, state, CPU seconds, resident memory; then the machine's load."""
    parts = []
    for p in procs:
        try:
            with p.oneshot():
                cpu = p.cpu_times()
                parts.append(
                    f"pid {p.pid} {p.status()}, {cpu.user + cpu.system:.1f} CPU s, "
                    f"{p.memory_info().rss / 2**20:.0f} MiB"
                )
        except psutil.Error:
            parts.append(f"pid {p.pid} gone")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    free = psutil.virtual_memory().available / 2**30
    return "; ".join(parts) + f"; load {load}, {free:.1f} GiB free"


# --- the supervisor ----------------------------------------------------------------


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``), or None where
    there is no such file. Unlike a wall-clock start time, which is boot time + ticks with the boot
    time worked out afresh from the clock on every call (so a clock adjustment moves it by a second
    or more), it never changes while the process lives."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])  # field 22; the name in (...) may hold spaces


def _same_start(proc: psutil.Process, record: dict) -> bool:
    """Whether ``proc`` is the process a PID file recorded, not a later one that reused its PID:
    the same start in ticks since boot, or (a record without them) within 2 s by the wall clock,
    which an adjustment of the clock can move."""
    ticks = record.get("start_ticks")
    if ticks is not None:
        return start_ticks(proc.pid) == ticks
    return abs(proc.create_time() - record["create_time"]) < 2.0


class Supervisor:
    def __init__(self, state_dir: Path, host: str, progress: Progress):
        """``host``: where components listen (a port taken there by another process is refused)."""
        self.state_dir, self.host, self.progress = state_dir, host, progress
        for sub in ("run", "logs", "data"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)

    def _pidfile(self, name: str) -> Path:
        return self.state_dir / "run" / f"{name}.pid"

    def log_path(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    def _owned_process(self, name: str) -> psutil.Process | None:
        """The process this folder's supervisor started for ``name``, if it is still the same process."""
        path = self._pidfile(name)
        if not path.exists():
            return None
        try:
            info = json.loads(path.read_text())
            proc = psutil.Process(info["pid"])
            if _same_start(proc, info) and proc.status() != psutil.STATUS_ZOMBIE:
                return proc
        except (ValueError, KeyError, psutil.Error):
            pass
        path.unlink(missing_ok=True)  # stale: the process is gone or the PID was reused
        return None

    def _started_as(self, name: str) -> list[str] | None:
        """The command line ``name`` was started with, as its PID file records it."""
        try:
            return json.loads(self._pidfile(name).read_text()).get("argv")
        except (OSError, ValueError):
            return None

    def alive(self, name: str) -> bool:
        return self._owned_process(name) is not None

    def start(self, comp: Component) -> None:
        """Start ``comp`` unless it is up and healthy, and wait until it is healthy."""
        proc = self._owned_process(comp.name)
        if proc is not None and comp.health():
            self.progress(f"{comp.name}: already up at {comp.url} (pid {proc.pid})")
            started_as = self._started_as(comp.name)
            if started_as is not None and started_as != [str(a) for a in comp.argv]:
                self.progress(
                    f"  {comp.name}: WARNING: it runs with other settings than the current ones (started as "
                    f"{' '.join(started_as)}); stop it and start it again to apply them"
                )
            return
        if proc is None and comp.port is not None and port_open(self.host, comp.port):
            raise StackError(
                f"{comp.name}: port {comp.port} on {self.host} is taken by a process this stack did not "
                f"start; stop it or choose another port (RATCHET_{comp.name.upper()}_PORT)"
            )
        if proc is None and comp.before_start:
            comp.before_start()
        for attempt in range(1, comp.start_attempts + 1):
            if proc is None:
                proc = self._spawn(comp)
            self.progress(
                f"{comp.name}: starting at {comp.url} (pid {proc.pid}, log {self.log_path(comp.name)})"
            )
            try:
                self._wait_healthy(comp, proc)
                break
            except StuckStart as exc:
                if attempt == comp.start_attempts:
                    raise
                self.progress(f"{comp.name}: {exc}\n{comp.name}: starting it again")
                proc = None
        if comp.after_start:
            comp.after_start()
        self.progress(f"{comp.name}: healthy")

    def _spawn(self, comp: Component) -> psutil.Process:
        env = {**os.environ, **QUIET_ENV, **comp.env}
        # Children run this checkout's code, whatever checkout the shared venv was installed from
        # (after the component's own folders, if it names any).
        paths = (comp.env.get("PYTHONPATH"), str(REPO), os.environ.get("PYTHONPATH"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        log = self.log_path(comp.name).open("ab")
        log.write(
            f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(map(str, comp.argv))}\n".encode()
        )
        log.flush()
        popen = subprocess.Popen(
            [str(a) for a in comp.argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.state_dir,
            start_new_session=True,
        )
        log.close()
        proc = psutil.Process(popen.pid)
        if comp.nice:
            # before it starts its own processes (vLLM's engine, seconds later), which inherit it
            proc.nice(min(19, os.getpriority(os.PRIO_PROCESS, 0) + comp.nice))
            _nice_autogroup(popen.pid, comp.nice)
        record = {
            "pid": popen.pid,
            "create_time": proc.create_time(),
            "start_ticks": start_ticks(popen.pid),
            "url": comp.url,
            "argv": [str(a) for a in comp.argv],
        }
        self._pidfile(comp.name).write_text(json.dumps(record))
        return proc

    def _wait_healthy(self, comp: Component, proc: psutil.Process) -> None:
        start = time.monotonic()
        last_note = start
        log = self.log_path(comp.name)
        log_size, last_output = _size(log), start
        while not comp.health():
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                self._pidfile(comp.name).unlink(missing_ok=True)
                raise StackError(
                    f"{comp.name} exited during start-up; last log lines:\n{self.tail_log(comp.name)}"
                )
            now = time.monotonic()
            if (size := _size(log)) != log_size:
                log_size, last_output = size, now
            if comp.silent_timeout_s is not None and now - last_output > comp.silent_timeout_s:
                state = self._dump_and_stop(comp, proc)
                raise StuckStart(
                    f"{comp.name} wrote nothing to its log for {comp.silent_timeout_s:.0f}s after starting "
                    f"({state}); its threads and last log lines:\n{self.tail_log(comp.name, 60)}"
                )
            if now - start > comp.start_timeout_s:
                state = self._dump_and_stop(comp, proc)
                raise StackError(
                    f"{comp.name} not healthy after {comp.start_timeout_s:.0f}s ({state}); "
                    f"last log lines:\n{self.tail_log(comp.name, 60)}"
                )
            if now - last_note > 15:
                self.progress(f"  {comp.name}: waiting for health ({now - start:.0f}s)")
                last_note = now
            time.sleep(0.2)

    def _dump_and_stop(self, comp: Component, proc: psutil.Process) -> str:
        """Stop a component that failed to start; return what its processes were doing. With
        PYTHONFAULTHANDLER=1 in its environment, SIGABRT first makes each Python process write its
        threads' stacks to the log."""
        group = [proc, *_children(proc)]
        state = describe_processes(group)
        if comp.env.get("PYTHONFAULTHANDLER"):
            for p in group:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(signal.SIGABRT)
            psutil.wait_procs(group, timeout=5)
        self.stop(comp.name)
        return state

    def tail_log(self, name: str, lines: int = 25) -> str:
        path = self.log_path(name)
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, name: str, timeout_s: float = 20.0) -> bool:
        """Stop the process group this folder's supervisor started for ``name``; True if something was stopped."""
        proc = self._owned_process(name)
        if proc is None:
            return False
        group = [proc, *proc.children(recursive=True)]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        alive = _wait_gone(group, timeout_s)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        _wait_gone(alive, 5)
        self._pidfile(name).unlink(missing_ok=True)
        return True

    def stop_all(self, known: list[str], names: list[str] | None = None) -> None:
        """Stop ``known`` (names in start order) in reverse order, after anything else this folder has a
        PID file for; only ``names``, if given."""
        others = sorted(p.stem for p in (self.state_dir / "run").glob("*.pid") if p.stem not in known)
        for name in others + list(reversed(known)):
            if names and name not in names:
                continue
            if self.stop(name):
                self.progress(f"{name}: stopped")
            else:
                self.progress(f"{name}: not running")

    def report(self, comp: Component) -> dict:
        """One row of a status table: pid, state (up, unhealthy, external, down), health, url, log."""
        proc = self._owned_process(comp.name)
        listening = comp.port is not None and port_open(self.host, comp.port)
        healthy = comp.health() if proc is not None or listening else False
        return {
            "component": comp.name,
            "pid": proc.pid if proc else None,
            "state": ("up" if healthy else "unhealthy") if proc else ("external" if healthy else "down"),
            "healthy": healthy,
            "url": comp.url,
            "log": str(self.log_path(comp.name)),
        }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until every process has exited; return those still running after ``timeout_s``. A zombie
    counts as exited: a process that another one started (``ratchet up``, a test) stays a zombie until
    that one reaps it, which psutil.wait_procs would wait out to its timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        for p in procs:  # reap our own children (psutil.wait_procs did)
            with contextlib.suppress(psutil.Error):
                p.wait(timeout=0)
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []
