"""Shared fixtures: a throwaway PostgreSQL server for the session, a fresh database per test.

``BOTKIT_TEST_DATABASE_URL`` (a ``postgresql://`` URL whose user may create databases) points
the tests at an existing server; otherwise one is started from ``initdb`` and ``pg_ctl``. If
neither is possible the PostgreSQL tests are skipped, except under CI, where they fail.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]
import pytest
import structlog

from botkit.llm import internals
from botkit.llm.internals import Internals
from botkit.stores.migrate import migrate
from botkit.testing import FakeAnthropicServer, FakeTelegramServer

DATABASE_URL_ENV = "BOTKIT_TEST_DATABASE_URL"
_SERVER_USER = "postgres"  # PostgreSQL will not run as root: root runs it as this user
_SEARCH_DIRS = ("/usr/local/bin", "/usr/local/pgsql/bin", "/usr/lib/postgresql/*/bin")
_SERVER_SETTINGS = {
    "listen_addresses": "''",  # unix socket only: no port to collide on
    "port": "5432",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


@dataclass(frozen=True)
class _Binaries:
    initdb: str
    pg_ctl: str


def _find_binaries() -> _Binaries | None:
    """``initdb`` and ``pg_ctl`` from one directory: PATH first, then the usual places."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return _Binaries(initdb, pg_ctl)
    for pattern in _SEARCH_DIRS:
        for folder in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            initdb, pg_ctl = f"{folder}/initdb", f"{folder}/pg_ctl"
            if os.access(initdb, os.X_OK) and os.access(pg_ctl, os.X_OK):
                return _Binaries(initdb, pg_ctl)
    return None


def _version_key(folder: str) -> tuple[int, ...]:
    """``/usr/lib/postgresql/16/bin`` sorts after ``.../9/bin``."""
    return tuple(int(part) for part in folder.split("/") if part.isdigit())


def _unavailable(reason: str) -> NoReturn:
    """Skip, or fail under CI, where a missing database must not pass unnoticed."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        pytest.fail(f"{reason} (CI is set, so this fails rather than skips)", pytrace=False)
    pytest.skip(f"{reason}; set {DATABASE_URL_ENV} to run these tests")


class _Server:
    """A PostgreSQL cluster in a temporary directory, reached over a unix socket there."""

    def __init__(self, binaries: _Binaries) -> None:
        self.binaries = binaries
        self.as_root = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="botkit-pg-"))
        self.data = self.root / "data"

    @property
    def dsn(self) -> str:
        """The admin URL of the ``postgres`` database."""
        return f"postgresql://{_SERVER_USER}@/postgres?host={self.root}&port=5432"

    def start(self) -> None:
        """initdb, then pg_ctl start; raises with the server's log if that fails."""
        if self.as_root:
            user = pwd.getpwnam(_SERVER_USER)
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self._run(
            self.binaries.initdb,
            *("-D", str(self.data), "-U", _SERVER_USER, "-A", "trust"),
            *("-E", "UTF8", "--locale=C", "--no-sync"),
        )
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"unix_socket_directories = '{self.root}'\n")
            conf.writelines(f"{key} = {value}\n" for key, value in _SERVER_SETTINGS.items())
        log = self.root / "server.log"
        try:
            self._run(self.binaries.pg_ctl, "-D", str(self.data), "-l", str(log), "-w", "start")
        except subprocess.CalledProcessError as e:
            server_log = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"{e}\n{e.stdout}\n{server_log}") from e

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its files."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(self.binaries.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, *command: str) -> None:
        if self.as_root:
            command = ("runuser", "-u", _SERVER_USER, "--", *command)
        subprocess.run(
            command,
            cwd=self.root,  # the server user may not be allowed into ours
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
        )


def _server_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return None
    if shutil.which("runuser") is None:
        return "PostgreSQL cannot run as root, and runuser is missing to run it as another user"
    try:
        pwd.getpwnam(_SERVER_USER)
    except KeyError:
        return f"PostgreSQL cannot run as root, and there is no {_SERVER_USER!r} user to run it"
    return None


@pytest.fixture(autouse=True)
def _logging_left_as_found(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test that runs ``botkit.cli.main`` in this process configures structlog: its loggers
    are never cached (``capture_logs`` in later tests could not see a cached one), and the
    configuration is undone after the test."""
    configure = structlog.configure

    def uncached(*args: object, **kwargs: object) -> None:
        configure(*args, **{**kwargs, "cache_logger_on_first_use": False})  # type: ignore[arg-type]

    monkeypatch.setattr(structlog, "configure", uncached)
    configured = structlog.is_configured()
    yield
    if not configured and structlog.is_configured():
        structlog.reset_defaults()


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The admin URL of a PostgreSQL server for this session (one that may create databases)."""
    if url := os.environ.get(DATABASE_URL_ENV):
        yield url
        return
    binaries = _find_binaries()
    if binaries is None:
        _unavailable("PostgreSQL not found (initdb/pg_ctl)")
    if reason := _server_unavailable_reason():
        _unavailable(reason)
    server = _Server(binaries)
    try:
        try:
            server.start()
        except (OSError, subprocess.SubprocessError, RuntimeError) as e:
            pytest.fail(f"could not start PostgreSQL from {binaries}: {e}", pytrace=False)
        yield server.dsn
    finally:
        server.stop()


def with_database(dsn: str, database: str) -> str:
    """``dsn`` (a URL) pointed at another database on the same server."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.fixture
async def postgres_db(postgres_dsn: str) -> AsyncIterator[str]:
    """The URL of a new, empty database, dropped after the test."""
    name = f"botkit_test_{secrets.token_hex(6)}"
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    finally:
        await admin.close()
    yield with_database(postgres_dsn, name)
    admin = await asyncpg.connect(postgres_dsn)
    try:
        force = " WITH (FORCE)" if admin.get_server_version().major >= 13 else ""
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}"{force}')
    finally:
        await admin.close()


@pytest.fixture
async def migrated_db(postgres_db: str) -> str:
    """A fresh database with botkit's migrations (the job queue included) applied."""
    await migrate(postgres_db)
    return postgres_db


@pytest.fixture
def db(migrated_db: str) -> str:
    """``migrated_db``, by the name the queued runtime's tests give it."""
    return migrated_db


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    """A fake Telegram Bot API on loopback, for this test only."""
    async with FakeTelegramServer() as server:
        yield server


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropicServer]:
    """A fake Messages API on loopback that echoes unless scripted."""
    async with FakeAnthropicServer() as server:
        yield server


@pytest.fixture(params=["fast", "sdk"])
def llm_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test over both LLM paths: botkit's own transport, and the SDK's public API that
    an install gets whose SDK lacks a private name the transport needs."""
    if request.param == "sdk":
        forced = Internals(missing_sdk=("forced by the test",))
        monkeypatch.setattr(internals, "check", lambda: forced)
    return str(request.param)


QUICK = frozenset(
    {
        "test_turns",
        "test_loop",
        "test_history",
        "test_thinking",
        "test_bot",
        "test_tools",
        "test_access",
        "test_sessions",
        "test_session_stores",
        "test_stores",
        "test_fake_anthropic",
        "test_fake_telegram",
    }
)
"""The files of ``pytest -m quick``: the turn, the gates, both stores' basics and the test kit."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the quick subset's tests (``-m quick``)."""
    for item in items:
        if item.path.stem in QUICK:
            item.add_marker(pytest.mark.quick)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run, naming them, if tests left threads that would keep Python from exiting
    (an aiosqlite store opened and never closed): better a red run than a hung one."""
    leftover = [
        thread
        for thread in threading.enumerate()
        if thread is not threading.main_thread() and not thread.daemon
    ]
    for thread in leftover:
        thread.join(timeout=5)
    stuck = [thread.name for thread in leftover if thread.is_alive()]
    if stuck:
        sys.stderr.write(f"\ntests left threads running (a store never closed?): {stuck}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
