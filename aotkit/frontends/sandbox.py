"""The sandbox that parses untrusted MLIR: one reusable worker process per aotkit process.

One worker process (`_probe.py`) per aotkit process parses every untrusted file, instead of
a new process per file (a process start and the bindings' import cost most of a second). It
starts on first use, is replaced when it dies (a crash on a corrupt file ends only it) or
times out, and is shut down at exit; it also ends by itself when this process does (its
stdin closes). Requests are serialized by a lock. `session(kind, data)` is the one entry
(aotkit/frontends/files.py's `parse_untrusted` reads the replies); a worker that times out
raises `Timeout`, one that dies `WorkerDied`, which `crash` and `last_line` put in words.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

from aotkit import _compat
from aotkit.frontends import _probe

# Seconds a sandboxed parse may take; a real module of millions of ops parses in a few.
PROBE_TIMEOUT_S = 300.0


class Timeout(Exception):
    pass


class WorkerDied(Exception):
    def __init__(self, returncode: int, message: str):
        super().__init__(returncode, message)
        self.returncode = returncode
        self.message = message


class _Worker:
    """One running `_probe.py` worker with its pipes and its stderr file."""

    def __init__(self, key: tuple[str, str, str]):
        self.key = key
        self.owner = os.getpid()
        # stderr goes to an anonymous file in append mode: the worker's writes land at its
        # end whatever this process reads, and a crash's last words are kept.
        self.stderr = tempfile.TemporaryFile()
        fd = self.stderr.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        self.proc = subprocess.Popen(
            list(key), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr
        )
        self.to_worker = self.proc.stdin.fileno()
        self.from_worker = self.proc.stdout.fileno()
        os.set_blocking(self.to_worker, False)
        os.set_blocking(self.from_worker, False)
        # Where in the stderr file the current request's messages start, and when the
        # current request times out.
        self.mark = 0
        self.deadline = 0.0
        self.served = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, kind: str, data: bytes, timeout: float) -> tuple[int, bytes]:
        """Sends one file; the first reply to it (`reply` reads the next ones)."""
        self.deadline = time.monotonic() + timeout
        frame = _probe.FRAME.pack(_probe.FORMAT_CODES[kind], len(data))
        try:
            self._send(frame + data, self.deadline)
        except BrokenPipeError:
            raise self._died() from None
        reply = self.reply()
        self.served += 1
        return reply

    def reply(self) -> tuple[int, bytes]:
        """The worker's next reply to the file it was sent last: (status, payload)."""
        try:
            head = self._receive(9, self.deadline)
            status, size = struct.unpack("<BQ", head)
            payload = self._receive(size, self.deadline) if size else b""
        except (BrokenPipeError, EOFError):
            raise self._died() from None
        self.mark = os.fstat(self.stderr.fileno()).st_size
        return status, payload

    def _wait(self, fd: int, write: bool, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout
        readable, writable, _ = select.select(
            [] if write else [fd], [fd] if write else [], [], remaining
        )
        if not (readable or writable):
            raise Timeout

    def _send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._wait(self.to_worker, True, deadline)
            try:
                view = view[os.write(self.to_worker, view[: 1 << 20]) :]
            except BlockingIOError:
                continue

    def _receive(self, n: int, deadline: float) -> bytes:
        chunks = []
        while n:
            self._wait(self.from_worker, False, deadline)
            try:
                chunk = os.read(self.from_worker, min(n, 1 << 20))
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _died(self) -> WorkerDied:
        try:
            returncode = self.proc.wait(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            returncode = self.proc.returncode
        fd = self.stderr.fileno()
        size = os.fstat(fd).st_size
        message = os.pread(fd, size - self.mark, self.mark).decode("utf-8", "backslashreplace")
        self.close()
        return WorkerDied(returncode, message)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self, wait: float = 0.0) -> None:
        """Ends the worker (end of input, then a kill after `wait` seconds) and its files."""
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if wait:
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self.stderr.close()


_worker: _Worker | None = None
_worker_lock = threading.Lock()
_atexit_registered = False


@contextlib.contextmanager
def session(kind: str, data: bytes):
    """Sends one file to the worker (starting one if needed); yields (status, payload,
    later) for its first reply, where `later()` reads the next one (see `_probe`), all under
    the worker lock. A worker whose replies were not all read (the caller left early) is
    ended, so that the next file's replies stay its own.

    A worker that had served other files and dies on this one's first reply may have died
    before it (killed from outside, say): the file then goes to a fresh worker, and only a
    fresh worker's death is the file's doing; a death after the first reply is this file's.
    """
    global _worker, _atexit_registered
    key = (sys.executable, _probe.__file__, _compat.__file__)
    with _worker_lock:
        while True:
            worker = _worker
            if worker is not None and worker.owner != os.getpid():
                worker = None  # a forked child: the parent's worker is not ours to talk to
            if worker is not None and (worker.key != key or not worker.alive()):
                worker.close()
                worker = None
            if worker is None:
                worker = _worker = _Worker(key)
                if not _atexit_registered:
                    atexit.register(_shutdown)
                    _atexit_registered = True
            try:
                status, payload = _replied(worker, worker.request, kind, data, PROBE_TIMEOUT_S)
                break
            except WorkerDied:
                if worker.served == 0:
                    raise
        # Replies still to come: a good file gets _probe.REPLIES, a failure ends them.
        pending = _probe.REPLIES - 1 if status == 0 else 0

        def later() -> tuple[int, bytes]:
            nonlocal pending
            pending -= 1
            try:
                reply = _replied(worker, worker.reply)
            except BaseException:
                pending = 0  # the worker is gone: nothing more will come
                raise
            if reply[0] != 0:
                pending = 0
            return reply

        try:
            yield status, payload, later
        finally:
            if pending > 0:
                # Left early (an exception here): rather than wait for the rest of this
                # file's replies, end the worker; the next file gets a fresh one.
                worker.close()
                _worker = None


def _replied(worker: _Worker, call, *args):
    """`call(*args)` on `worker`, which is dropped when it times out (killed) or dies."""
    global _worker
    try:
        return call(*args)
    except Timeout:
        worker.close()
        _worker = None
        raise
    except WorkerDied:
        _worker = None
        raise


def _shutdown() -> None:
    global _worker
    with _worker_lock:
        if _worker is not None and _worker.owner == os.getpid():
            _worker.close(wait=2.0)
        _worker = None


def crash(returncode: int, message: str) -> str:
    if returncode < 0:
        try:
            return f"MLIR's reader crashed ({signal.Signals(-returncode).name})"
        except ValueError:
            return f"MLIR's reader crashed (signal {-returncode})"
    detail = last_line(message)
    return f"MLIR's reader failed (exit status {returncode}{': ' + detail if detail else ''})"


def last_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1] if lines else ""
