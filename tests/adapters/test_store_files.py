"""What else a store's folder may hold, and who may not write it: a folder or a FIFO named *.jsonl, a record file this
user cannot read, a read-only store, and the files of compactions killed part-way. The reader, the compaction and its
locking skip what is no regular file or cannot be read (with a warning naming it: docs/durability.md), a read-only
store is one line (exit 2 from the command line), and a killed compaction's file is removed once it is provably dead.

As root (as these tests may run), a file's mode does not stop a read: the checks that need a permission to be
refused run in a child process started by `setpriv` without the capabilities that override file permissions
(CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), and each first checks that the refusal is real."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from model_adapters import compaction, durable
from model_adapters import store_records as record_io

MODEL = {"adapter": "test", "settings": {}}
REPO = Path(__file__).resolve().parents[2]


def key_of(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def write_file(folder: Path, name: str, records: list[tuple[str, float, int]]) -> None:
    (folder / name).write_text("".join(
        record_io.record_line(folder.name, key_of(k), {"A": [loss, True, " A"], "B": [loss + 1, False, " B"]}, w)
        for k, loss, w in records))


@pytest.fixture
def folder(tmp_path) -> Path:
    store = durable.ScoreStore.open(MODEL, 0, root=tmp_path / "cache")
    store.close()
    return store.folder


def opened(folder: Path) -> durable.ScoreStore:
    return durable.ScoreStore.open(MODEL, 0, root=folder.parent.parent)


class _Hung(Exception):
    pass


def within(seconds: int, call, *args):
    """call(*args), failing the test instead of hanging (a FIFO opened for reading waits for a writer)."""
    def stop(signum, frame):
        raise _Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        return call(*args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_what_is_no_regular_file_is_skipped_by_the_reader_and_the_compaction(folder, warnings, kind, capsys):
    from visdep_metrics.cli.main import main

    write_file(folder, "rank0-h-1-aaaa.jsonl", [("q1", 1.0, 1)])
    write_file(folder, "rank1-h-1-bbbb.jsonl", [("q2", 2.0, 1)])
    odd = folder / "rank2-h-1-cccc.jsonl"
    if kind == "folder":
        odd.mkdir()
        write_file(odd, "inner.jsonl", [("q3", 3.0, 1)])
    else:
        os.mkfifo(odd)
    store = within(20, opened, folder)
    assert len(store) == 2 and store.get(key_of("q1"))["A"][0] == 1.0
    assert any(f"{odd}: not a regular file; skipped" in m for m in warnings)
    assert within(20, main, ["store", "compact", str(folder.parent.parent)]) == 0
    assert "2 files merged" in capsys.readouterr().out
    assert odd.exists() and (odd.is_dir() if kind == "folder" else odd.is_fifo())
    assert len(within(20, opened, folder)) == 2
    # past COMPACT_AFTER_FILES files the store compacts when opened, with the odd one among them
    for w in range(durable.COMPACT_AFTER_FILES + 1):
        write_file(folder, f"rank{w + 10}-h-1-dddd.jsonl", [(f"w{w}", float(w), 2)])
    assert len(within(20, opened, folder)) == 2 + durable.COMPACT_AFTER_FILES + 1
    assert sorted(p.name for p in record_io.record_files(folder))[-1] == odd.name


def without_permission_override(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run `script` in a child Python that file permissions bind: as root, without CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH (setpriv, util-linux); as another user, as that user."""
    prefix = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root and setpriv (util-linux) is missing: a file's mode would not stop a read")
        caps = "-dac_override,-dac_read_search"
        prefix = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run([*prefix, sys.executable, str(path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})


def test_an_unreadable_record_file_is_skipped_by_the_compaction_and_its_locks(folder, tmp_path):
    """Before: `ScoreStore.open` died in `compaction._lock` (PermissionError) once past COMPACT_AFTER_FILES files,
    although the reader alone warned and skipped."""
    for w in range(durable.COMPACT_AFTER_FILES + 1):
        write_file(folder, f"rank{w}-h-1-aaaa.jsonl", [(f"q{w}", float(w), 1)])
    write_file(folder, "rank99-h-1-ffff.jsonl", [("secret", 9.0, 1)])
    unreadable = folder / "rank99-h-1-ffff.jsonl"
    unreadable.chmod(0)
    result = without_permission_override(f"""
        from pathlib import Path
        from loguru import logger
        import sys
        from model_adapters import durable
        from visdep_metrics.cli.main import main
        try:
            open({str(unreadable)!r}, "rb")
            sys.exit("the file is readable: this check would prove nothing")
        except PermissionError:
            pass
        logger.remove()
        logger.add(sys.stderr, level="WARNING", format="{{message}}")
        store = durable.ScoreStore.open({MODEL!r}, 0, root={str(folder.parent.parent)!r})
        print("opened", len(store))
        print("compact", main(["store", "compact", {str(folder)!r}]))
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"opened {durable.COMPACT_AFTER_FILES + 1}"
    assert "compact 0" in result.stdout
    assert f"{unreadable}: cannot be read (Permission denied); skipped" in result.stderr
    assert "Traceback" not in result.stderr
    assert unreadable.exists() and len(record_io.record_files(folder)) == 2  # merged, and the unreadable one left


def test_a_read_only_store_is_one_line(folder, tmp_path):
    write_file(folder, "rank0-h-1-aaaa.jsonl", [("q1", 1.0, 1)])
    write_file(folder, "rank1-h-1-bbbb.jsonl", [("q2", 2.0, 1)])
    cache = folder.parent.parent
    for path in (folder, folder.parent, cache):
        path.chmod(0o555)
    try:
        result = without_permission_override(f"""
            import os, subprocess, sys
            from model_adapters import durable
            from model_adapters.compaction import StoreError
            if os.access({str(folder)!r}, os.W_OK):
                sys.exit("the folder is writable: this check would prove nothing")
            store = durable.ScoreStore.open({MODEL!r}, 0, root={str(cache)!r})  # reading needs no write
            print("read", len(store))
            try:
                store.add({{"{key_of('q3')}": {{"A": [1.0, True, " A"], "B": [2.0, False, " B"]}}}})
            except StoreError as e:
                print("add:", e)
            try:
                durable.ScoreStore.open({{"adapter": "another"}}, 0, root={str(cache)!r})
            except StoreError as e:
                print("new model:", e)
            cli = subprocess.run([sys.executable, "-m", "visdep_metrics.cli.main", "store", "compact",
                                  {str(cache)!r}], capture_output=True, text=True)
            print("cli", cli.returncode, repr(cli.stderr))
        """, tmp_path)
    finally:
        for path in (folder, folder.parent, cache):
            path.chmod(0o755)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "read 2"
    assert lines[1].startswith(f"add: {folder}: the durable store cannot be written (Permission denied")
    assert lines[2].startswith(f"new model: {folder.parent}") and "cannot be written" in lines[2]
    code, stderr = lines[3].split(" ", 2)[1:]
    stderr = eval(stderr)  # noqa: S307 - the repr printed above
    assert code == "2" and stderr.count("\n") == 1 and "cannot be written (Permission denied" in stderr, stderr
    assert "Traceback" not in result.stderr + stderr


KILLER = """
import os, signal, sys
from model_adapters import compaction
real = os.replace
def killed(source, target):
    if ".compacting-" in str(source):
        os.kill(os.getpid(), signal.SIGKILL)  # the merged copy written and synced, not yet renamed into place
    real(source, target)
os.replace = killed
compaction.compact(sys.argv[1])
"""


def test_a_killed_compactions_file_is_removed_once_provably_dead(folder, warnings):
    write_file(folder, "rank0-h-1-aaaa.jsonl", [("q1", 1.0, 1)])
    write_file(folder, "rank1-h-1-bbbb.jsonl", [("q2", 2.0, 1)])
    killed = subprocess.Popen([sys.executable, "-c", KILLER, str(folder)], stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert killed.wait(timeout=120) == -signal.SIGKILL, killed.stderr.read()
    [left] = folder.glob(".compacting-*")
    assert left.name.startswith(f".compacting-{record_io.host_name()}-{killed.pid}-") and left.stat().st_size > 0
    # beside it: a live compaction's file (this process's), another host's, and one an older visdep named
    live = folder / f".compacting-{record_io.host_name()}-{os.getpid()}-0123abcd.tmp"
    other_host = folder / ".compacting-elsewhere-12345-0123abcd.tmp"
    older = folder / ".compacting-12345-0123abcd.tmp"
    for path in (live, other_host, older):
        path.write_bytes(b"x")
    assert compaction.remove_dead_tmp(folder) == 1
    assert not left.exists() and live.exists() and other_host.exists() and older.exists()
    assert any("2 file(s) of compactions that may still run" in m and other_host.name in m for m in warnings)
    # the records the killed compaction was merging are all there, and a compaction now merges them
    assert len(opened(folder)) == 2
    done = compaction.compact(folder)
    assert done.merged == 2 and done.records == 2
    # a dead process's file that is still locked (its pid reused by a live compaction elsewhere) is left
    import fcntl

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    locked = folder / f".compacting-{record_io.host_name()}-{int(dead.stdout)}-0123abcd.tmp"
    with open(locked, "wb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        assert compaction.remove_dead_tmp(folder) == 0 and locked.exists()
    assert compaction.remove_dead_tmp(folder) == 1 and not locked.exists()
