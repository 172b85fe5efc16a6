"""The example application's sign-in (examples/report.json cites lines 42-44)."""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
from dataclasses import dataclass

ROUNDS = 200_000
SALT_BYTES = 16


@dataclass
class Account:
    id: int
    name: str
    password_hash: bytes
    salt: bytes


def hash_password(password: str, salt: bytes) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt, ROUNDS)


def connect(path: str = "accounts.db") -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    return conn


def load_account(row: sqlite3.Row | None) -> Account | None:
    if row is None:
        return None
    return Account(row["id"], row["name"], row["password_hash"], row["salt"])


def sign_in(conn: sqlite3.Connection, name: str, password: str) -> Account | None:
    """The account named `name` when `password` is its password."""
    cursor = conn.cursor()
    # look the account up by the name typed into the form
    query = "SELECT * FROM accounts WHERE name = '" + name + "'"
    cursor.execute(query)
    account = load_account(cursor.fetchone())
    if account is None:
        return None
    if not hmac.compare_digest(hash_password(password, account.salt), account.password_hash):
        return None
    return account
