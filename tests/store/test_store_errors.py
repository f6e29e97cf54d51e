"""Store URLs a user can get wrong: each fails with one line that says what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from gapforge.store import Store, StoreError


def open_error(url: str) -> str:
    with pytest.raises(StoreError) as err:
        Store(url)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("url", ["", "nonsense", "sqlite//missing-colon.db"])
def test_unparseable_url(url: str) -> None:
    message = open_error(url)
    assert message.startswith(f"bad store URL {url!r}") and "sqlite:///" in message and "GAPFORGE_STORE_URL" in message


def test_unsupported_backend_and_in_memory_sqlite() -> None:
    assert "unsupported store backend 'mysql'" in open_error("mysql://u:secret@host/db")
    assert "secret" not in open_error("mysql://u:secret@host/db")
    assert "in-memory SQLite" in open_error("sqlite://")
    assert "in-memory SQLite" in open_error("sqlite:///:memory:")


def test_unreachable_postgres_names_the_server_and_hides_the_password() -> None:
    pytest.importorskip("psycopg", reason="extra 'postgres' not installed (pip install -e .[postgres]); CI installs it")
    message = open_error("postgresql://user:hunter2@127.0.0.1:1/gapforge")
    assert message.startswith("cannot open store 'postgresql+psycopg://user:***@127.0.0.1:1/gapforge'")
    assert "hunter2" not in message and "check that the server runs" in message


def test_unwritable_sqlite_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    message = open_error(f"sqlite:///{blocker / 'sub' / 'gapforge.db'}")
    assert "cannot create the directory of the SQLite store" in message and "writable" in message


def test_sqlite_parent_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "x" / "y" / "z" / "gapforge.db"
    with Store(f"sqlite:///{path}") as store:
        store.create_run("trace", {})
    assert path.is_file()


def test_schema_version_mismatch_is_reported(sqlite_url: str) -> None:
    Store(sqlite_url).close()
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE store_meta SET value = '0' WHERE key = 'schema_version'"))
    engine.dispose()
    message = open_error(sqlite_url)
    assert "has schema version 0" in message and "new workspace" in message


def test_store_error_is_a_cli_user_error() -> None:
    from gapforge.faults import StoreFault

    assert issubclass(StoreError, StoreFault) and StoreError.exit_code == 2 and not StoreError.infrastructure


def test_a_file_that_is_not_a_database_is_named_and_left_untouched(tmp_path: Path) -> None:
    notes = tmp_path / "notes.db"
    notes.write_text("my notes, not a database\n" * 200)
    message = open_error(f"sqlite:///{notes}")
    assert "file is not a database" in message and "not a gapforge SQLite store" in message
    assert "server" not in message  # a SQLite fault gets a SQLite hint
    assert notes.read_text() == "my notes, not a database\n" * 200  # no data lost


def test_a_directory_as_the_sqlite_file_gets_a_file_hint(tmp_path: Path) -> None:
    message = open_error(f"sqlite:///{tmp_path}")
    assert "server" not in message and "unable to open" in message
