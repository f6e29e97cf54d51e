"""Store fixtures: the same tests run on a SQLite file and on the real PostgreSQL server.

Each PostgreSQL test gets a fresh schema (selected through the connection's
search_path), dropped afterwards, so tests and CI runs never see each other's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from gapforge.store import Store


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'nested' / 'dir' / 'gapforge.db'}"


@pytest.fixture
def pg_schema_url(postgres_url: str) -> Iterator[str]:
    """A store URL on the test server whose tables live in a fresh schema of their own."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_url)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(postgres_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_schema_url"
    return request.getfixturevalue(name)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store(store_url) as s:
        yield s
