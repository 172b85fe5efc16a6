"""A deliberately vulnerable sample: a hard-coded password and an unsafe deserializer."""

import pickle

PASSWORD = "hunter2"


def load(blob: bytes) -> object:
    return pickle.loads(blob)
