"""The README's leader example: lead while the sidecar says so, stop the moment it does not."""

import signal
import threading

import baton

stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
signal.signal(signal.SIGINT, lambda *_: stop.set())


# --- README ---
def lead(term: baton.Term) -> None:
    print("leading with fencing token", term.token, flush=True)
    term.ended.wait()  # do the leader's work until term.ended is set


baton.Client().run_leader_election(lead, stop=stop)
# --- README ---
