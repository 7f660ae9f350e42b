"""The table storage's folders, through fsspec: a local folder or a filesystem URI (the ``storage``
setting). Spark reads and writes the tables through Hadoop and delta-rs through its own object store
client; what neither does (list a folder's tables, delete one, tell when one was last written, read
what a local table's new commits added and removed) is here.
fsspec serves ``file://`` and local paths itself; ``s3a://`` needs s3fs installed, ``abfss://`` adlfs."""

from __future__ import annotations

import json
import os
from urllib.parse import urlparse

from fsspec.core import url_to_fs

from views.tables import opened

LOG = "_delta_log"
#: The actions of a commit that only adds and removes files (a stream's micro-batch, an append, a compaction).
FILE_ACTIONS = frozenset({"add", "remove", "commitInfo", "txn"})


def _fs(location: str):
    """The fsspec filesystem of ``location`` and its path there, listing afresh: s3fs would otherwise
    answer from the first listing of a folder for as long as the process runs."""
    fs, path = url_to_fs(location)
    fs.invalidate_cache()
    return fs, path


def local_path(location: str) -> str | None:
    """The local path of ``location`` (a path or a ``file://`` URI); None for any other URI."""
    url = urlparse(location)
    return location if not url.scheme else url.path if url.scheme == "file" else None


def _under(root: str, path: str, found: str) -> str:
    """``found``, an fsspec path under ``path`` (``root`` as fsspec names it), as a location under ``root``."""
    return root.rstrip("/") + found[len(path.rstrip("/")) :]


def delta_tables(root: str) -> list[str]:
    """The Delta tables at or under ``root``, as locations."""
    fs, path = _fs(root)
    logs = fs.glob(f"{path.rstrip('/')}/**/{LOG}") if fs.exists(path) else []
    return sorted(_under(root, path, log)[: -len(LOG) - 1] for log in logs)


def folders(root: str) -> list[str]:
    """The folders directly under ``root`` (none if it does not exist), as locations."""
    fs, path = _fs(root)
    if not fs.exists(path):
        return []
    return sorted(
        _under(root, path, entry["name"]) for entry in fs.ls(path, detail=True) if entry["type"] == "directory"
    )


def delete(location: str) -> None:
    """Delete the folder at ``location`` and everything in it, if it is there."""
    fs, path = _fs(location)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def last_written(location: str) -> float:
    """When the table at ``location`` was last written (seconds since the epoch): its newest Delta
    commit, or, with no commit yet (a write under way or failed), its newest file; 0 if it has none."""
    table = opened(location)
    if table is not None:
        return table.history(1)[0]["timestamp"] / 1000
    fs, path = _fs(location)
    return max((fs.modified(found).timestamp() for found in fs.find(path)), default=0.0)


def read_on(folder: str, version: int) -> tuple[int, list[dict], list[dict]] | None:
    """The Delta table in local ``folder`` read on from ``version`` by its log alone, if its commits since
    then only added and removed files (under its folder, without deletion vectors): the version it is at,
    their ``add`` actions and their ``remove`` actions. None if a commit did more (changed the schema) or
    the log no longer holds ``version``: read the table anew.
    (delta-rs reads a table's whole state again to move to a new version: 50 ms at 10,000 files, where
    a micro-batch's commit is a few lines.)"""
    log, adds, removes = os.path.join(folder, LOG), list[dict](), list[dict]()
    while True:
        try:
            with open(os.path.join(log, f"{version + 1:020d}.json"), encoding="utf-8") as commit:
                actions = [json.loads(line) for line in commit if line.strip()]
        except FileNotFoundError:  # the latest, unless the log was cleaned up past it
            return (version, adds, removes) if os.path.exists(os.path.join(log, f"{version:020d}.json")) else None
        files = [action[kind] for action in actions for kind in ("add", "remove") if kind in action]
        if not all(action.keys() <= FILE_ACTIONS for action in actions) or any(
            "://" in file["path"] or file.get("deletionVector") for file in files
        ):
            return None
        adds += [action["add"] for action in actions if "add" in action]
        removes += [action["remove"] for action in actions if "remove" in action]
        version += 1


def committed_at(folder: str, version: int) -> float | None:
    """When commit ``version`` of the Delta table in local ``folder`` was made (its commitInfo's time,
    seconds since the epoch), read from that commit alone; None if it is gone or says no time."""
    try:
        with open(os.path.join(folder, LOG, f"{version:020d}.json"), encoding="utf-8") as commit:
            stamps = [json.loads(line).get("commitInfo", {}).get("timestamp") for line in commit if line.strip()]
    except FileNotFoundError:
        return None
    return next((stamp / 1000 for stamp in stamps if stamp is not None), None)
