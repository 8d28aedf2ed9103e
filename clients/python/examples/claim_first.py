"""Claim-first writes: a PostgreSQL row that refuses a stale lock holder.

A lease can lapse while its holder is stalled (a GC pause, swapping, a slow disk),
and the next holder then gets a larger fence. The row remembers the largest fence
that claimed it, so a holder that wakes up late with a smaller one changes nothing:

1. claim:  UPDATE t SET fence = $f WHERE id = $id AND fence < $f RETURNING value
2. write:  UPDATE t SET value = ... WHERE id = $id AND fence = $f
           (0 rows: a newer holder claimed the row; you are stale, redo with a new lease)

The claim commits on its own, before the work, so a newer holder is visible to a
stale one however long the work takes.

Run it against a broker and a database:

    pip install 'lockbroker[examples]'
    LOCKBROKER_URL=http://127.0.0.1:7700 \\
    DATABASE_URL='host=127.0.0.1 user=postgres dbname=test' python claim_first.py
"""

from __future__ import annotations

import os
from typing import Callable

import psycopg
from psycopg import sql

from lockbroker import Client, Lease


class StaleFence(Exception):
    """A newer lease has claimed the row; this holder must not write."""


def create_table(conn: psycopg.Connection, table: str) -> None:
    """A table of counters, each row with the last fence that claimed it."""
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            " id bigint PRIMARY KEY,"
            " fence bigint NOT NULL DEFAULT 0,"
            " value bigint NOT NULL DEFAULT 0)"
        ).format(sql.Identifier(table))
    )


def claim(conn: psycopg.Connection, table: str, row_id: int, fence: int) -> int:
    """Step 1: records ``fence`` on the row if it is the largest yet; returns the
    row's value. Raises :class:`StaleFence` if a newer (or the same) fence got there
    first."""
    with conn.transaction():
        row = conn.execute(
            sql.SQL(
                "UPDATE {} SET fence = %(f)s WHERE id = %(id)s AND fence < %(f)s RETURNING value"
            ).format(sql.Identifier(table)),
            {"f": fence, "id": row_id},
        ).fetchone()
    if row is None:
        raise StaleFence(f"row {row_id} was claimed by a fence newer than {fence}")
    return row[0]


def write(conn: psycopg.Connection, table: str, row_id: int, fence: int, value: int) -> None:
    """Step 2: writes ``value`` only while the row still carries ``fence``."""
    with conn.transaction():
        updated = conn.execute(
            sql.SQL("UPDATE {} SET value = %(v)s WHERE id = %(id)s AND fence = %(f)s").format(
                sql.Identifier(table)
            ),
            {"v": value, "id": row_id, "f": fence},
        ).rowcount
    if updated == 0:
        raise StaleFence(f"row {row_id} was claimed by a fence newer than {fence}")


def update_row(
    conn: psycopg.Connection,
    table: str,
    row_id: int,
    lease: Lease,
    compute: Callable[[int], int],
) -> int:
    """Claims the row with the lease's fence, computes the new value from the old
    one, and writes it. Returns the value written."""
    current = claim(conn, table, row_id, lease.fence)
    new_value = compute(current)
    lease.raise_if_lost()  # cheap early exit; the fence check below is the real guard
    write(conn, table, row_id, lease.fence, new_value)
    return new_value


def main() -> None:
    table, row_id = os.environ.get("CLAIM_FIRST_TABLE", "claim_first_demo"), 1
    client = Client.from_env()
    dsn = os.environ.get("DATABASE_URL", "host=127.0.0.1 user=postgres dbname=test")
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_table(conn, table)
        conn.execute(
            sql.SQL("INSERT INTO {} (id) VALUES (%s) ON CONFLICT DO NOTHING").format(
                sql.Identifier(table)
            ),
            (row_id,),
        )
        with client.lock(f"{table}:{row_id}", ttl=10, wait=10) as lease:
            value = update_row(conn, table, row_id, lease, lambda v: v + 1)
            print(f"fence {lease.fence}: counter is now {value}")


if __name__ == "__main__":
    main()
