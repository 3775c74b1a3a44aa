"""A SQLite file deleted or replaced under a running store: every write is refused
(`StoreReplacedError`, nothing written) instead of acknowledged into a file nobody reads."""

from __future__ import annotations

import os
import shutil

import pytest

from persistence import open_store
from protocol import Message, StoreReplacedError


@pytest.mark.parametrize("group_commit", [True, False])
@pytest.mark.parametrize("how", ["replaced", "deleted"])
def test_writes_to_a_moved_file_are_refused(tmp_path, how, group_commit):
    path = str(tmp_path / "state.db")
    store = open_store(path, group_commit=group_commit)
    try:
        store.create_session("s")
        store.append("s", Message("user", "before"))
        os.rename(path, path + ".moved")
        if how == "replaced":
            shutil.copy(path + ".moved", path)
        with pytest.raises(StoreReplacedError, match=how):
            store.append("s", Message("user", "after"))
        with pytest.raises(StoreReplacedError):
            store.create_session("t")
    finally:
        store.close()
    # nothing reached any file (database, WAL) after the move
    for name in os.listdir(tmp_path):
        assert b'"after"' not in (tmp_path / name).read_bytes(), name


def test_a_chdir_is_not_a_replaced_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = open_store("relative.db")
    try:
        store.create_session("s")
        monkeypatch.chdir(tmp_path.parent)
        assert store.append("s", Message("user", "still the same file"))[0].seq == 1
    finally:
        store.close()
