"""Real baton-sidecar processes on the ensembles sdk/test.sh started (sdk/testenv.sh), and a TCP
proxy that cuts a sidecar off from its ensemble."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import threading
import time
import unittest

# How long any one wait in these tests may take before the test fails.
BOUND = 60.0

_counter = itertools.count()


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run the tests with sdk/test.sh, which starts the ensembles")
    return value


def unique(prefix: str) -> str:
    """A name no other test or earlier run uses (the ensembles are shared)."""
    return f"{prefix}-{os.getpid()}-{time.time_ns() % 1_000_000_000}-{next(_counter)}"


class Sidecar:
    """A running baton-sidecar; ``stop()`` (or the test's cleanup) kills it."""

    def __init__(self, test: unittest.TestCase, ensemble: str | None, identity: str, elections=(), *extra: str):
        ensemble = ensemble or env("BATON_SDK_ENSEMBLE")
        extra = list(extra)
        listen = "127.0.0.1:0"
        if "--listen" in extra:
            at = extra.index("--listen")
            listen = extra[at + 1]
            del extra[at:at + 2]
        args = [env("BATON_SIDECAR_BIN"), "--ensemble", ensemble, "--listen", listen,
                "--identity", identity]
        if "--session-timeout" not in extra:
            args += ["--session-timeout", "10s"]
        for e in elections:
            args += ["--election", e]
        args += list(extra)
        self.identity = identity
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=dict(os.environ, BATON_LOG="info,baton_sidecar=debug"))
        threading.Thread(target=self._collect, daemon=True).start()
        test.addCleanup(self.kill)
        line = self.wait_log("serving the HTTP API")
        self.addr = next(w[len("addr="):] for w in line.split() if w.startswith("addr="))
        self.wait_log("recipe::session: session established")

    def _collect(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            with self._cond:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._cond.notify_all()
        self.proc.stderr.close()
        self.proc.wait()
        with self._cond:
            self._cond.notify_all()

    def wait_log(self, needle: str) -> str:
        """Waits (on the log as it is written) for a line containing needle."""
        deadline = time.monotonic() + BOUND
        with self._cond:
            while True:
                for line in self.lines:
                    if needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"{self.identity}: no log line with {needle!r} "
                                         f"(exit {self.proc.poll()}):\n" + "\n".join(self.lines))
                self._cond.wait(left)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self) -> int:
        return self.proc.wait(BOUND)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(BOUND)


class Proxy:
    """Forwards a local port to target until cut: then every connection closes and new ones are
    refused, as a network partition between a sidecar and its ensemble would."""

    def __init__(self, test: unittest.TestCase, target: str):
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._conns: list[socket.socket] = []
        self._cut = False
        self._mu = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()
        test.addCleanup(self.close)

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._listener.accept()
            except OSError:
                return
            with self._mu:
                if self._cut:
                    c.close()
                    continue
                try:
                    up = socket.create_connection(self._target)
                except OSError:
                    c.close()
                    continue
                self._conns += [c, up]
            threading.Thread(target=self._pipe, args=(c, up), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, c), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def set_cut(self, cut: bool) -> None:
        with self._mu:
            self._cut = cut
            if cut:
                for c in self._conns:
                    try:
                        c.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    c.close()
                self._conns = []

    def close(self) -> None:
        self._listener.close()
        self.set_cut(True)
