"""A deliberately vulnerable sample for the SARIF ingestion test: Bandit must flag it."""

import sqlite3
import subprocess


def find_user(conn: sqlite3.Connection, name: str) -> list[tuple[str]]:
    query = f"SELECT name FROM users WHERE name = '{name}'"
    return conn.execute(query).fetchall()


def ping(host: str) -> int:
    return subprocess.call("ping -c 1 " + host, shell=True)
