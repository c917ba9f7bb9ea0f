"""Helpers shared by the kazoo scripts: connect, bounded waits, and checks that exit non-zero."""

import logging
import os
import sys
import threading

from kazoo.client import KazooClient

# BATON_TEST_VERBOSE=1 logs kazoo's connection handling with timestamps (shown when a test fails).
if os.environ.get("BATON_TEST_VERBOSE"):
    logging.basicConfig(level=logging.DEBUG, format="%(relativeCreated)6d %(threadName)s %(name)s: %(message)s")

# Upper bound for any single wait: a hang fails the script instead of stalling the suite.
WAIT_SECONDS = 30


def hosts_from_argv():
    """The HOST:PORT the test passes as the only argument."""
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} HOST:PORT")
    return sys.argv[1]


def connect(hosts, **kwargs):
    """A started KazooClient; fails the script if no session is made in time."""
    client = KazooClient(hosts=hosts, timeout=20.0, **kwargs)
    client.start(timeout=WAIT_SECONDS)
    return client


def close(client):
    """Ends the session (deleting its ephemerals) and frees the client's threads."""
    client.stop()
    client.close()


def check(condition, message):
    """Fails the script with `message` when `condition` is false."""
    if not condition:
        raise AssertionError(message)


def wait(event, what):
    """Waits for a threading.Event, failing after WAIT_SECONDS."""
    if not event.wait(WAIT_SECONDS):
        raise AssertionError(f"timed out waiting for {what}")


class Observed:
    """A list of values appended by watch callbacks, with a wait for a given value."""

    def __init__(self):
        self._values = []
        self._changed = threading.Condition()

    def append(self, value):
        with self._changed:
            self._values.append(value)
            self._changed.notify_all()

    def wait_for_last(self, value, what):
        self.wait_until(lambda last: last == value, what)

    def wait_until(self, predicate, what):
        """Waits until the latest value satisfies `predicate`."""
        with self._changed:
            ok = self._changed.wait_for(lambda: self._values and predicate(self._values[-1]), WAIT_SECONDS)
        if not ok:
            raise AssertionError(f"timed out waiting for {what}: observed {self.values()}")

    def values(self):
        with self._changed:
            return list(self._values)
