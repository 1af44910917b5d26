"""Data loss: aotkit never destroys a file it did not make (issue 26, class "loss").

The persistent cache deletes entries to stay under its cap and on `clear()`; it must delete
only files it can prove it wrote (its naming scheme, in a folder holding its tag), and never
follow a link out of its folder or block on what sits at an entry's name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aotkit
from aotkit import cache
from aotkit.errors import CacheWarning

X = np.linspace(-1, 1, 8, dtype=np.float32)


@pytest.fixture
def folder(tmp_path):
    yield tmp_path / "models"
    cache.configure(dir=None, max_bytes=cache.DEFAULT_MAX_BYTES)


def _compile(scale: float):
    return aotkit.jit(lambda x: x * scale).lower(X).compile()


def test_a_folder_of_the_users_artifacts_is_refused_and_kept(folder):
    folder.mkdir()
    mine = folder / "production_v3.aotx"
    _compile(3.0).save(mine)
    before = mine.read_bytes()
    (folder / ".notes.tmp").write_text("mine too")
    cache.configure(dir=folder, max_bytes=20_000)
    with pytest.warns(CacheWarning) as seen:
        for scale in (1.0, 2.0, 4.0):
            _compile(scale)
        cache.clear()
    assert str(seen[0].message) == (
        f"aotkit cache: {folder} holds files aotkit did not write ('.notes.tmp', "
        "'production_v3.aotx') and no CACHEDIR.TAG, so it is not used as the cache (the cache "
        "deletes its entries to stay under its size cap, and must never delete yours); set "
        "AOTKIT_CACHE_DIR to a folder of its own, or AOTKIT_CACHE_DIR=off"
    )
    assert len(seen) == 1  # once per folder
    assert mine.read_bytes() == before and (folder / ".notes.tmp").exists()
    assert sorted(p.name for p in folder.iterdir()) == [".notes.tmp", "production_v3.aotx"]


def test_a_tagged_folder_deletes_only_its_own_entries(folder):
    cache.configure(dir=folder)
    _compile(1.0)
    assert (
        (folder / cache.TAG).read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    )
    mine = folder / "mine.aotx"  # a user's file dropped into the cache's own folder later
    mine.write_bytes(b"keep me")
    odd = folder / ("f" * 64 + ".aotx.d")
    odd.mkdir()  # the right name shape, but not a regular file
    cache.configure(dir=folder, max_bytes=1)  # everything over the cap: evict all
    _compile(2.0)
    cache.clear()
    assert mine.read_bytes() == b"keep me" and odd.is_dir()
    assert cache.stats().entries == 0


def test_a_link_at_an_entry_name_is_never_followed_or_deleted_through(folder, tmp_path):
    cache.configure(dir=folder)
    _compile(1.0)
    (entry,) = folder.glob("*.aotx")
    outside = tmp_path / "outside.aotx"
    outside.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(outside)
    assert cache.stats().entries == 0  # a link is not an entry
    out = aotkit.jit(lambda x: x * 1.0).lower(X).compile()(X)  # a miss, compiled again
    np.testing.assert_array_equal(np.asarray(out), X)
    cache.clear()
    assert outside.exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_or_dev_zero_at_an_entry_name_is_a_miss_not_a_hang(tmp_path):
    """In a child process: a hang or unbounded read must not take the test run with it."""
    script = textwrap.dedent(
        f"""
        import os, numpy as np, aotkit
        from aotkit import cache
        folder = {str(tmp_path / "c")!r}
        cache.configure(dir=folder)
        x = np.ones(3, np.float32)
        aotkit.jit(lambda x: x + 1).lower(x).compile()
        (entry,) = [n for n in os.listdir(folder) if n.endswith(".aotx")]
        os.unlink(os.path.join(folder, entry))
        os.mkfifo(os.path.join(folder, entry))
        print(aotkit.jit(lambda x: x + 1).lower(x).compile()(x))
        os.unlink(os.path.join(folder, entry))
        os.symlink("/dev/zero", os.path.join(folder, entry))
        print(aotkit.jit(lambda x: x + 1).lower(x).compile()(x))
        """
    )
    env = {**os.environ, "AOTKIT_CACHE_DIR": str(tmp_path / "c")}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[2. 2. 2.]", "[2. 2. 2.]"]


def test_an_unusable_cache_setting_never_fails_a_compile(tmp_path):
    script = textwrap.dedent(
        """
        import warnings, numpy as np, aotkit
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for _ in range(2):
                out = aotkit.jit(lambda x: x + 1).lower(np.ones(2, np.float32)).compile()
        print(out(np.ones(2, np.float32)))
        print(len(seen), seen[0].message)
        """
    )
    env = {**os.environ, "AOTKIT_CACHE_DIR": "~nosuchuser-aotkit/c"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "[2. 2.]"
    assert lines[1] == (
        "1 aotkit cache: AOTKIT_CACHE_DIR='~nosuchuser-aotkit/c' cannot be used (Could not "
        "determine home directory.); running without the persistent cache: set "
        "AOTKIT_CACHE_DIR to an absolute folder path, or AOTKIT_CACHE_DIR=off"
    )
    with pytest.raises(ValueError, match=r"configure: dir='~nosuchuser-aotkit/c': Could not"):
        cache.configure(dir="~nosuchuser-aotkit/c")


def test_a_folder_at_an_entry_name_leaves_the_rest_of_the_cache_working(folder):
    cache.configure(dir=folder)
    _compile(1.0)
    (entry,) = folder.glob("*.aotx")
    entry.unlink()
    entry.mkdir()
    with pytest.warns(CacheWarning, match=r"is not a regular file, so 'lambda' stays uncached"):
        _compile(1.0)
    _compile(5.0)  # another program still caches
    assert cache.stats().entries == 1 and entry.is_dir()


# --- saving: atomic, the umask's mode, links replaced not written through ---------------------


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_a_new_artifact_gets_the_mode_the_umask_gives(tmp_path, umask_027):
    path = tmp_path / "new.aotx"
    _compile(2.0).save(path)
    assert (path.stat().st_mode & 0o777) == 0o640
    assert np.asarray(aotkit.load(path)(X)).tolist() == (X * 2.0).tolist()


def test_saving_over_a_file_keeps_its_mode(tmp_path):
    path = tmp_path / "shared.aotx"
    _compile(2.0).save(path)
    path.chmod(0o604)
    _compile(3.0).save(path)
    assert (path.stat().st_mode & 0o777) == 0o604
    assert np.asarray(aotkit.load(path)(X)).tolist() == (X * 3.0).tolist()


def test_saving_over_a_link_replaces_the_link_and_leaves_its_target(tmp_path, umask_027):
    target = tmp_path / "elsewhere" / "production.aotx"
    target.parent.mkdir()
    _compile(2.0).save(target)
    before = target.read_bytes()
    link = tmp_path / "latest.aotx"
    link.symlink_to(target)
    _compile(3.0).save(link)
    assert not link.is_symlink() and (link.stat().st_mode & 0o777) == 0o640
    assert target.read_bytes() == before  # never written through the link
    assert np.asarray(aotkit.load(link)(X)).tolist() == (X * 3.0).tolist()


def test_a_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "good.aotx"
    _compile(2.0).save(path)
    before = path.read_bytes()

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        _compile(3.0).save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.aotx"]


@pytest.mark.skipif(not os.path.islink("/dev/stdout"), reason="no /dev/stdout link here")
def test_cli_output_to_dev_stdout_writes_through_the_link(tmp_path):
    source = tmp_path / "inc.py"
    source.write_text("def f(x):\n    return x + 1\n")
    out = tmp_path / "out.mlir"
    with open(out, "wb") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "aotkit", "lower", f"{source}:f", "--shapes", "f32[]"]
            + ["-o", "/dev/stdout"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("module @f {")
    assert os.path.islink("/dev/stdout")  # the link in /dev is still a link
