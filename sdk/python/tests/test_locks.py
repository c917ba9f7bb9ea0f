import signal
import threading
import time
import unittest

from harness import BOUND, Proxy, Sidecar, unique

import baton


def wait_lost(test: unittest.TestCase, held) -> baton.Ended:
    test.assertTrue(held.lost.wait(BOUND), "still held: the client never learnt it lost it")
    return held.cause


class Locks(unittest.TestCase):
    def test_stream_hold_is_exclusive_and_released_on_exit(self):
        name = unique("lock")
        a = baton.Client(Sidecar(self, None, unique("a")).addr)
        b = baton.Client(Sidecar(self, None, unique("b")).addr)
        with a.lock(name) as first:
            g = first.grant
            self.assertEqual((g["hold"], g["lock"], g["expiresAt"]), ("stream", name, None))
            self.assertGreater(first.token, 0)
            with self.assertRaises(baton.NotGranted) as refused:
                b.try_lock(name)
            self.assertEqual(refused.exception.status, 409)
            with self.assertRaises(baton.AlreadyHeld):
                a.lock(name, wait=0)
            granted = []
            waiter = threading.Thread(target=lambda: granted.append(b.lock(name, wait=BOUND)))
            waiter.start()
            while not a.lock_state(name)["waiters"]:
                time.sleep(0.02)  # polled: no event says a pod queued
        self.assertIsInstance(first.cause, baton.Released)
        waiter.join(BOUND)
        with granted[0] as second:
            self.assertGreater(second.token, first.token, "the fencing token grows")

    def test_killed_sidecar_ends_the_stream_hold_within_valid_until(self):
        s = Sidecar(self, None, unique("a"))
        held = baton.Client(s.addr).lock(unique("lock"))
        valid_until = held.valid_until
        s.signal(signal.SIGKILL)
        self.assertIsInstance(wait_lost(self, held), baton.Lost)
        self.assertLessEqual(time.time(), valid_until, "learnt of the loss after validUntil")

    def test_hung_sidecar_ends_the_hold_at_valid_until(self):
        s = Sidecar(self, None, unique("a"))
        held = baton.Client(s.addr).lock(unique("lock"))
        s.signal(signal.SIGSTOP)
        self.addCleanup(s.signal, signal.SIGCONT)
        self.assertIsInstance(wait_lost(self, held), baton.ValidUntilPassed)
        self.assertGreaterEqual(time.time(), held.valid_until)
        with self.assertRaises(baton.ValidUntilPassed):
            held.check()

    def test_lease_ends_at_the_first_failed_renewal(self):
        s = Sidecar(self, None, unique("a"))
        client = baton.Client(s.addr)
        renewals = []
        call = client._t.call

        def counting(op, name, *args, **kwargs):
            if op == baton._contract.OP_LOCK_RENEW:
                renewals.append(name)
            return call(op, name, *args, **kwargs)

        client._t.call = counting
        name = unique("lease")
        held = client.lock(name, ttl=3)
        self.assertEqual(held.grant["hold"], "lease")
        self.assertFalse(held.lost.wait(4), "a renewed lease ended")  # renewals keep it past its TTL
        baton.Client(s.addr).release_lock(name, held.token)  # behind the holder's back
        cause = wait_lost(self, held)
        self.assertIsInstance(cause, baton.Lost)
        self.assertIsInstance(cause.__cause__, baton.NotHeld)
        before = len(renewals)
        time.sleep(2.5)  # two more renewals (every second) had the loop gone on
        self.assertEqual(len(renewals), before, "renewals went on after the failure")

    def test_killed_sidecar_ends_the_lease(self):
        s = Sidecar(self, None, unique("a"))
        lost = threading.Event()
        held = baton.Client(s.addr).lock(unique("lease"), ttl=30, on_lost=lambda _: lost.set())
        valid_until = held.valid_until
        s.signal(signal.SIGKILL)
        self.assertIsInstance(wait_lost(self, held), baton.Lost)
        self.assertLessEqual(time.time(), valid_until)
        self.assertTrue(lost.is_set(), "on_lost was called")

    def test_wait_limit_inspection_release_by_token_and_stop(self):
        c = baton.Client(Sidecar(self, None, unique("a")).addr)
        other = baton.Client(Sidecar(self, None, unique("b")).addr)
        name = unique("lock")
        for wait in (600.5, -1):
            with self.assertRaises(ValueError):
                c.lock(name, wait=wait)
        for ttl in (0.05, 86400.5):  # a lease is 100 ms to 24 h
            with self.assertRaises(ValueError):
                c.lock(name, ttl=ttl)
        self.assertTrue(c.healthy())
        permit = c.semaphore(name, 2, ttl=30)
        state = c.semaphore_state(name)
        self.assertEqual((state["permits"], state["self"]["holds"], state["self"]["token"]),
                         (2, True, permit.token))
        c.release_semaphore(name, permit.token)
        self.assertFalse(c.semaphore_state(name)["self"]["holds"])
        permit.release()
        for ttl in (None, 30):
            with c.try_lock(name, ttl=ttl) as held:
                stop = threading.Event()
                failed: list[BaseException] = []

                def wait_for_it(ttl=ttl, stop=stop, failed=failed):
                    try:
                        other.lock(name, ttl=ttl, stop=stop)
                    except BaseException as e:  # noqa: BLE001 - the test looks at it
                        failed.append(e)

                waiter = threading.Thread(target=wait_for_it)
                waiter.start()
                while not c.lock_state(name)["waiters"]:
                    time.sleep(0.02)
                stop.set()
                waiter.join(BOUND)
                self.assertFalse(waiter.is_alive(), "stop did not end the wait")
                self.assertIsInstance(failed[0], baton.Cancelled)
                self.assertTrue(held.held())

    def test_semaphore_permits(self):
        name = unique("sem")
        held = [baton.Client(Sidecar(self, None, unique("p")).addr).semaphore(name, 2) for _ in range(2)]
        self.assertEqual((held[0].grant["semaphore"], held[0].grant["permits"]), (name, 2))
        third = baton.Client(Sidecar(self, None, unique("p")).addr)
        with self.assertRaises(baton.NotGranted):
            third.semaphore(name, 2, wait=0)
        with self.assertRaises(baton.InvalidPermits):
            third.semaphore(name, 0)
        held[0].release()
        with third.semaphore(name, 2, wait=BOUND):
            pass
        held[1].release()

    def test_cut_app_connection_ends_the_hold_on_both_sides(self):
        s = Sidecar(self, None, unique("a"))
        link = Proxy(self, s.addr)
        name = unique("lock")
        held = baton.Client(link.addr).lock(name)
        valid_until = held.valid_until
        link.set_cut(True)
        self.assertIsInstance(wait_lost(self, held), baton.Lost)
        self.assertLessEqual(time.time(), valid_until, "learnt of the loss after validUntil")
        # Another pod (this one's release of the closed stream is on its way, not yet done).
        other = Sidecar(self, None, unique("b"))
        with baton.Client(other.addr).lock(name, wait=BOUND) as after:
            self.assertGreater(after.token, held.token)


if __name__ == "__main__":
    unittest.main()
