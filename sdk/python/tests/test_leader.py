import queue
import signal
import threading
import unittest

from harness import BOUND, Proxy, Sidecar, env, unique

import baton


class Terms:
    """Runs run_leader_election in a thread and records what its callbacks saw."""

    def __init__(self, test: unittest.TestCase, client: baton.Client, election: str, **kwargs):
        self.started: queue.Queue[baton.Term] = queue.Queue()
        self.stopped: queue.Queue[baton.Ended] = queue.Queue()
        self.leaders: list = []
        self.stop = threading.Event()
        self.error: list = []

        def lead(term: baton.Term) -> None:
            self.started.put(term)
            term.ended.wait()  # an app that leads until told to stop

        def run() -> None:
            try:
                client.run_leader_election(lead, election=election, stop=self.stop,
                                           on_stopped_leading=self.stopped.put,
                                           on_new_leader=self.leaders.append, **kwargs)
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.error.append(e)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        test.addCleanup(self.finish)

    def next_start(self) -> baton.Term:
        return self.started.get(timeout=BOUND)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(BOUND)


def wait_leader(client: baton.Client, election: str, identity: str) -> dict:
    """Long-polls until identity leads election (a hand-over may pass through a moment with no
    leader, which a single long-poll would answer)."""
    token = 0
    while True:
        info = client.wait_leader_change(election, token, BOUND)
        leader = info.get("leader")
        if leader and leader["identity"] == identity:
            return info
        token = leader["token"] if leader else 0


def wait_ended(test: unittest.TestCase, term: baton.Term) -> baton.Ended:
    test.assertTrue(term.ended.wait(BOUND), "still leading: the client never learnt it lost it")
    return term.cause


class Leadership(unittest.TestCase):
    def test_runs_the_leader_and_ends_the_term_when_deposed(self):
        election = unique("election")
        a = Sidecar(self, None, unique("a"), [election])
        terms = Terms(self, baton.Client(a.addr), election)
        term = terms.next_start()
        b = Sidecar(self, None, unique("b"), [election])
        seen = wait_leader(baton.Client(b.addr), election, a.identity)
        self.assertEqual((seen["leader"]["identity"], seen["leader"]["token"]), (a.identity, term.token))
        baton.Client(a.addr).resign(election)  # behind the app's back
        self.assertIsInstance(wait_ended(self, term), baton.Lost)
        self.assertIsInstance(terms.stopped.get(timeout=BOUND), baton.Lost)
        wait_leader(baton.Client(b.addr), election, b.identity)
        self.assertEqual(terms.leaders[0]["identity"], a.identity)

    def test_sigterm_hands_leadership_over(self):
        election = unique("handoff")
        # The longest grace: only the client's release can end the wait within the test.
        a = Sidecar(self, None, unique("a"), [election], "--release-grace", "5m")
        terms = Terms(self, baton.Client(a.addr), election)
        term = terms.next_start()
        b = Sidecar(self, None, unique("b"), [election])
        a.signal(signal.SIGTERM)
        wait_leader(baton.Client(b.addr), election, b.identity)
        terms.thread.join(BOUND)
        self.assertFalse(terms.thread.is_alive(), "run_leader_election returned after the hand-over")
        # The last term is the one stepping-down ended (the sidecar may have said "not leading,
        # leading again" in between: that ends a term and starts another with the same token).
        last = term
        while not terms.started.empty():
            last = terms.started.get_nowait()
        self.assertIsInstance(last.cause, baton.SteppingDown)
        self.assertEqual(terms.error, [])
        self.assertEqual(a.wait_exit(), 0)
        a.wait_log("the app released the election")

    def test_suspended_session_stops_the_leader_until_it_resumes(self):
        election = unique("suspend")
        link = Proxy(self, env("BATON_SDK_ENSEMBLE"))
        a = Sidecar(self, link.addr, unique("a"), [election])
        client = baton.Client(a.addr)
        stop_events = threading.Event()
        self.addCleanup(stop_events.set)
        states: queue.Queue[str] = queue.Queue()

        def watch() -> None:
            for ev in client.events(stop_events):
                if ev.name == "state":
                    states.put(ev.data["state"])

        threading.Thread(target=watch, daemon=True).start()
        self.assertEqual(states.get(timeout=BOUND), "CONNECTED")
        terms = Terms(self, client, election)
        term = terms.next_start()
        link.set_cut(True)
        self.assertIsInstance(wait_ended(self, term), (baton.Suspended, baton.Lost))
        while states.get(timeout=BOUND) != "SUSPENDED":
            pass
        link.set_cut(False)
        again = terms.next_start()
        self.assertEqual(again.token, term.token, "the resumed session leads on with the same token")

    def test_campaign_stands_while_running(self):
        election = unique("campaign")
        a = Sidecar(self, None, unique("a"), [election], "--candidacy", "app")
        b = Sidecar(self, None, unique("b"), [election])
        wait_leader(baton.Client(b.addr), election, b.identity)
        terms = Terms(self, baton.Client(a.addr), election, campaign=True)
        members = baton.Client(b.addr).members(election)
        while len(members["members"]) < 2:
            members = baton.Client(b.addr).members(election, version=members["version"], wait=30)
        baton.Client(b.addr).resign(election)
        term = terms.next_start()
        terms.finish()
        self.assertIsNotNone(wait_ended(self, term))
        wait_leader(baton.Client(b.addr), election, b.identity)

    def test_members_and_barrier(self):
        election = unique("group")
        a = Sidecar(self, None, unique("a"), [election])
        b = Sidecar(self, None, unique("b"), [election])
        members = baton.Client(a.addr).members(election)
        while len(members["members"]) < 2:
            members = baton.Client(a.addr).members(election, version=members["version"], wait=30)
        # Queue order is creation order, and both sidecars start their candidacy at once.
        self.assertEqual(sorted(m["identity"] for m in members["members"]), sorted([a.identity, b.identity]))
        self.assertEqual([m["leader"] for m in members["members"]], [True, False])
        name = unique("barrier")
        other = threading.Thread(target=baton.Client(b.addr).barrier, args=(name, 2, BOUND))
        other.start()
        baton.Client(a.addr).barrier(name, 2, BOUND)
        other.join(BOUND)
        with self.assertRaises(baton.NotPassed):
            baton.Client(a.addr).barrier(unique("alone"), 2, 0)

    def test_against_zookeeper(self):
        election = unique("zk")
        a = Sidecar(self, env("BATON_SDK_ZOOKEEPER"), unique("a"), [election])
        client = baton.Client(a.addr)
        term = Terms(self, client, election).next_start()
        held = client.lock(unique("lock"))
        self.assertGreater(held.token, term.token, "tokens are czxids")
        a.signal(signal.SIGKILL)
        self.assertTrue(held.lost.wait(BOUND))
        self.assertIsInstance(held.cause, baton.Lost)
        self.assertIsNotNone(wait_ended(self, term))

    def test_events_reconnect_after_the_sidecar_restarts(self):
        s = Sidecar(self, None, unique("a"))
        stop = threading.Event()
        self.addCleanup(stop.set)
        events: queue.Queue = queue.Queue()

        def watch() -> None:
            for ev in baton.Client(s.addr).events(stop):
                events.put(ev)

        threading.Thread(target=watch, daemon=True).start()

        def next_event(want):
            while True:
                ev = events.get(timeout=BOUND)
                if want(ev):
                    return ev

        def connected(ev):
            return ev.name == "state" and ev.data["state"] == "CONNECTED"

        next_event(connected)
        s.signal(signal.SIGKILL)
        gone = next_event(lambda ev: ev.name == baton.DISCONNECTED)
        self.assertTrue(gone.data["error"])
        Sidecar(self, None, unique("a"), (), "--listen", s.addr)
        next_event(connected)


if __name__ == "__main__":
    unittest.main()
