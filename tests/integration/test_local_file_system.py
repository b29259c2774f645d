"""The platform's ``java.nio`` local file system (``include/maven/localfs``) answers as
Hadoop's ``RawLocalFileSystem`` should, without starting a process.

Driven through the suite's real driver (the ``local`` profile sets
``spark.local_file_system: nio``), through both of Hadoop's APIs: ``FileSystem`` (Delta,
Parquet) and ``FileContext`` (Spark's checkpoint file manager). Every answer is checked
against Python's own ``os.stat`` / ``os.lstat`` / ``os.readlink`` of the same path.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

pytestmark = pytest.mark.integration

#: Permissions as ``ls -l`` shows them, and the mode ``chmod`` would give.
MODES = {
    "-rw-r--r--": 0o644,
    "-rw-------": 0o600,
    "-rwxr-x---": 0o750,
    "-r--r-----": 0o440,
    "----------": 0o000,
    "-rwxrwxrwx": 0o777,
    "--w---x-w-": 0o212,
}


def _hadoop_path(spark, path: Path):
    return spark._jvm.org.apache.hadoop.fs.Path(path.as_uri())


def _file_system(spark, path: Path):
    return _hadoop_path(spark, path).getFileSystem(spark._jsc.hadoopConfiguration())


def _file_context(spark, path: Path):
    jvm = spark._jvm
    return jvm.org.apache.hadoop.fs.FileContext.getFileContext(
        _hadoop_path(spark, path).toUri(), spark._jsc.hadoopConfiguration()
    )


def _permission(spark, symbolic: str):
    return spark._jvm.org.apache.hadoop.fs.permission.FsPermission.valueOf(symbolic)


def _java_error(error: Py4JJavaError) -> str:
    return error.java_exception.getClass().getName()


def test_both_apis_use_the_nio_classes(spark, tmp_path: Path) -> None:
    fs = _file_system(spark, tmp_path)
    assert fs.getClass().getName() == "io.ingest.hadoop.NioLocalFileSystem"
    assert fs.getRawFileSystem().getClass().getName() == "io.ingest.hadoop.NioRawLocalFileSystem"
    context = _file_context(spark, tmp_path)
    assert context.getDefaultFileSystem().getClass().getName() == "io.ingest.hadoop.NioLocalFs"


@pytest.mark.parametrize("api", ["FileSystem", "FileContext"])
def test_set_permission_gives_the_mode_chmod_would(spark, tmp_path: Path, api: str) -> None:
    target = tmp_path / "part-00000.parquet"
    target.write_bytes(b"x")
    folder = tmp_path / "_delta_log"
    folder.mkdir()
    opener = _file_system if api == "FileSystem" else _file_context
    handle = opener(spark, tmp_path)
    for symbolic, mode in MODES.items():
        handle.setPermission(_hadoop_path(spark, target), _permission(spark, symbolic))
        assert stat.S_IMODE(os.stat(target).st_mode) == mode, symbolic
        # A folder keeps its owner's execute bit here: the test must be able to enter it.
        folder_symbolic = "d" + "rwx" + symbolic[4:]
        handle.setPermission(_hadoop_path(spark, folder), _permission(spark, folder_symbolic))
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 | (mode & 0o077), folder_symbolic
    # The sticky bit, which java.nio cannot set, goes to Hadoop's own code.
    handle.setPermission(_hadoop_path(spark, folder), _permission(spark, "drwxrwxrwt"))
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o1777


def test_set_permission_on_a_missing_path_is_refused(spark, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(Py4JJavaError, match="does not exist") as raised:
        _file_system(spark, tmp_path).setPermission(
            _hadoop_path(spark, missing), _permission(spark, "-rw-r--r--")
        )
    assert _java_error(raised.value) == "java.io.FileNotFoundException"
    assert str(missing) in str(raised.value)
    assert not missing.exists()


def test_a_symlink_is_reported_as_one_and_a_file_as_itself(spark, tmp_path: Path) -> None:
    target = tmp_path / "00000000000000000001.json"
    target.write_bytes(b'{"commitInfo":{}}\n')
    link = tmp_path / "link"
    link.symlink_to(target.name)  # relative, as written
    dangling = tmp_path / "dangling"
    dangling.symlink_to("nowhere")
    fs = _file_system(spark, tmp_path)

    plain = fs.getFileLinkStatus(_hadoop_path(spark, target))
    assert not plain.isSymlink()
    assert plain.isFile()
    assert plain.getLen() == os.lstat(target).st_size

    linked = fs.getFileLinkStatus(_hadoop_path(spark, link))
    assert linked.isSymlink()
    assert Path(linked.getSymlink().toUri().getPath()) == tmp_path / os.readlink(link)
    assert linked.getLen() == os.stat(link).st_size  # the target's length, as Hadoop gives
    assert fs.getLinkTarget(_hadoop_path(spark, link)).toString() == os.readlink(link)

    broken = fs.getFileLinkStatus(_hadoop_path(spark, dangling))
    assert broken.isSymlink()
    assert broken.getLen() == 0
    assert Path(broken.getSymlink().toUri().getPath()) == tmp_path / os.readlink(dangling)

    # A folder is a folder; what getFileStatus says of a link is its target's.
    assert fs.getFileLinkStatus(_hadoop_path(spark, tmp_path)).isDirectory()
    assert not fs.getFileStatus(_hadoop_path(spark, link)).isSymlink()


def test_link_status_of_a_missing_path_is_refused(spark, tmp_path: Path) -> None:
    with pytest.raises(Py4JJavaError, match="does not exist") as raised:
        _file_system(spark, tmp_path).getFileLinkStatus(_hadoop_path(spark, tmp_path / "gone"))
    assert _java_error(raised.value) == "java.io.FileNotFoundException"


def test_rename_over_an_existing_file_as_checkpoints_do(spark, tmp_path: Path) -> None:
    """Spark's checkpoint file manager writes a temporary file, then renames it over the
    final name with ``FileContext.rename(..., OVERWRITE)``: the link checks above decide
    whether that rename is allowed."""
    jvm = spark._jvm
    temporary, final = tmp_path / ".0.tmp", tmp_path / "0"
    temporary.write_text("v1\n{}\n")
    final.write_text("stale\n")
    overwrite = jvm.org.apache.hadoop.fs.Options.Rename.OVERWRITE
    gateway = spark.sparkContext._gateway
    rename_options = gateway.new_array(jvm.org.apache.hadoop.fs.Options.Rename, 1)
    rename_options[0] = overwrite
    _file_context(spark, tmp_path).rename(
        _hadoop_path(spark, temporary), _hadoop_path(spark, final), rename_options
    )
    assert final.read_text() == "v1\n{}\n"
    assert not temporary.exists()
