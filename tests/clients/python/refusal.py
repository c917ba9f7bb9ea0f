"""kazoo (Debian's python3-kazoo) meets a Baton refusal: tests/e2e/tests/refusals.rs.

refusal.py HOST:PORT: with a shared quota of 5,000 bytes, the first 3,000-byte create passes,
the second is refused; then reads, a small create and deletes must work on the same session,
with no disconnection seen. Prints each step; exits 0 only if all of it held.
"""

import sys

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError  # the default handler's

# Each call waits at most this long: a client whose connection died fails here, not hangs.
WAIT_SECONDS = 15
BASE = "/refusals"
BIG = b"x" * 3000


class NoAnswer(Exception):
    """A call that got no answer in time (kazoo's connection thread died)."""


def call(what, async_result):
    """The result of a kazoo *_async call; NoAnswer names the step that hung."""
    try:
        return async_result.get(timeout=WAIT_SECONDS)
    except KazooTimeoutError as err:
        raise NoAnswer(f"{what}: no answer within {WAIT_SECONDS} s") from err


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} HOST:PORT")
    client = KazooClient(hosts=sys.argv[1], timeout=20.0)
    client.start(timeout=WAIT_SECONDS)
    states = []  # SUSPENDED or LOST after the start: the connection was lost
    client.add_listener(states.append)
    session = client.client_id[0]
    print(f"session 0x{session:x}", flush=True)

    call("create base", client.ensure_path_async(BASE))
    call("create big-1", client.create_async(f"{BASE}/big-1", BIG))
    print("created big-1", flush=True)
    try:
        call("create big-2", client.create_async(f"{BASE}/big-2", BIG))
    except KazooException as err:  # the refusal, whatever kazoo calls it
        print(
            f"refused big-2: {type(err).__module__}.{type(err).__name__}: {err!r}",
            flush=True,
        )
    else:
        raise AssertionError("big-2 was not refused")

    stat = call("exists big-1", client.exists_async(f"{BASE}/big-1"))
    assert stat is not None, "big-1 is gone"
    data, _ = call("get big-1", client.get_async(f"{BASE}/big-1"))
    assert data == BIG, f"big-1 holds {len(data)} bytes"
    print("read big-1", flush=True)
    call("create small", client.create_async(f"{BASE}/small", b"s"))
    call("delete small", client.delete_async(f"{BASE}/small"))
    print("created and deleted small", flush=True)
    call("delete big-1", client.delete_async(f"{BASE}/big-1"))
    call("create big-2 after the delete", client.create_async(f"{BASE}/big-2", BIG))
    print("big-2 created once big-1 was deleted", flush=True)

    assert client.client_id[0] == session, (
        f"session changed to 0x{client.client_id[0]:x}"
    )
    assert not states, f"connection states seen after the start: {states}"
    print(f"same session 0x{session:x}, no disconnection", flush=True)
    client.stop()
    client.close()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
