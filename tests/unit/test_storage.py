"""The table storage's folder operations (infra.storage) on a plain folder, a ``file://`` URI and an
``s3a://`` URI of a real S3 API (the session's S3Proxy; not in the fast tier)."""

import time

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from fsspec.core import url_to_fs

from infra import storage


@pytest.fixture(params=["folder", "file URI", pytest.param("s3a URI", marks=pytest.mark.processes)])
def root(tmp_path, request) -> str:
    if request.param == "s3a URI":
        return f"{request.getfixturevalue('object_store')}/{tmp_path.name}"
    return str(tmp_path / "lake") if request.param == "folder" else (tmp_path / "lake").as_uri()


def test_tables_folders_files_and_deletion(root):
    assert storage.delta_tables(root) == [] and storage.folders(root) == []
    for name in ("raw_events", "batch/views", "batch/views@v2"):
        write_deltalake(f"{root}/{name}", pa.table({"n": [1, 2]}))
    write_deltalake(f"{root}/raw_events", pa.table({"n": [3]}), mode="append")
    assert storage.delta_tables(root) == [f"{root}/batch/views", f"{root}/batch/views@v2", f"{root}/raw_events"]
    assert storage.folders(f"{root}/batch") == [f"{root}/batch/views", f"{root}/batch/views@v2"]
    write_deltalake(f"{root}/batch/views@v3", pa.table({"n": [1]}))  # made after the folder was listed
    assert storage.folders(f"{root}/batch") == [
        f"{root}/batch/views",
        f"{root}/batch/views@v2",
        f"{root}/batch/views@v3",
    ]
    storage.delete(f"{root}/batch/views@v2")
    storage.delete(f"{root}/batch/views@v2")  # gone already: nothing to do
    assert storage.folders(f"{root}/batch") == [f"{root}/batch/views", f"{root}/batch/views@v3"]


def test_last_written_is_the_newest_commit_or_else_the_newest_file(root):
    before = time.time()
    write_deltalake(f"{root}/t", pa.table({"n": [1]}))
    assert before - 1 <= storage.last_written(f"{root}/t") <= time.time() + 1
    fs, path = url_to_fs(f"{root}/leftover")  # a write that failed before its first commit
    fs.makedirs(path, exist_ok=True)
    fs.pipe(f"{path}/part-0.parquet", b"x")
    assert before - 1 <= storage.last_written(f"{root}/leftover") <= time.time() + 1
    assert storage.last_written(f"{root}/nothing") == 0


def test_only_folders_and_file_uris_are_local():
    assert storage.local_path("/data/lake/t") == "/data/lake/t"
    assert storage.local_path("file:///data/lake/t") == "/data/lake/t"
    assert storage.local_path("s3a://bucket/lake/t") is None
