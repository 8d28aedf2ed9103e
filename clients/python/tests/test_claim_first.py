"""The claim-first PostgreSQL example: a stalled holder whose lease lapsed cannot
overwrite the work of the holder after it.

Needs PostgreSQL at 127.0.0.1:5432 (trust auth, user postgres, database test), or
a libpq connection string in LOCKBROKER_TEST_PG_DSN; skipped when it is unreachable.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install psycopg[binary])")
from psycopg import sql  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "claim_first.py"
DSN = os.environ.get(
    "LOCKBROKER_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=3"
)


def load_example():
    spec = importlib.util.spec_from_file_location("claim_first", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


claim_first = load_example()


@pytest.fixture
def conn():
    try:
        connection = psycopg.connect(DSN, autocommit=True)
    except psycopg.OperationalError as error:
        pytest.skip(f"PostgreSQL is unreachable ({DSN}): {error}")
    with connection:
        yield connection


@pytest.fixture
def table(conn):
    """A counters table of this test's own, with row 1 at value 0, dropped after."""
    name = f"claim_first_{uuid.uuid4().hex[:12]}"
    claim_first.create_table(conn, name)
    conn.execute(sql.SQL("INSERT INTO {} (id) VALUES (1)").format(sql.Identifier(name)))
    yield name
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def row(conn, table):
    return conn.execute(
        sql.SQL("SELECT fence, value FROM {} WHERE id = 1").format(sql.Identifier(table))
    ).fetchone()


def test_a_holder_whose_lease_lapsed_cannot_write_after_the_next_holder_claimed(
    client, conn, table, name
):
    stalled = client.acquire(name, ttl=0.4)
    assert claim_first.claim(conn, table, 1, stalled.fence) == 0
    time.sleep(0.6)  # the stall outlives the lease

    with client.lock(name, ttl=5) as current:
        assert current.fence > stalled.fence
        assert claim_first.update_row(conn, table, 1, current, lambda v: v + 1) == 1

    with pytest.raises(claim_first.StaleFence):
        claim_first.write(conn, table, 1, stalled.fence, 100)
    with pytest.raises(claim_first.StaleFence):
        claim_first.claim(conn, table, 1, stalled.fence)
    assert row(conn, table) == (current.fence, 1)


def test_a_stale_holder_cannot_claim_after_a_newer_one(client, conn, table, name):
    older = client.acquire(name, ttl=0.3)
    time.sleep(0.4)
    newer = client.acquire(name, ttl=5)
    claim_first.update_row(conn, table, 1, newer, lambda v: v + 10)
    newer.release()

    with pytest.raises(claim_first.StaleFence):
        claim_first.claim(conn, table, 1, older.fence)
    assert row(conn, table) == (newer.fence, 10)


def test_each_new_lease_claims_and_writes_in_turn(client, conn, table, name):
    for expected in (1, 2, 3):
        with client.lock(name, ttl=5) as lease:
            assert claim_first.update_row(conn, table, 1, lease, lambda v: v + 1) == expected


def test_the_example_runs_as_a_script(broker, conn, table):
    env = dict(os.environ, LOCKBROKER_URL=broker.url, DATABASE_URL=DSN, CLAIM_FIRST_TABLE=table)
    for expected in (1, 2):
        result = subprocess.run(
            [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert f"counter is now {expected}" in result.stdout
