import asyncio
import unittest

from harness import BOUND, Sidecar, unique

import baton


class Aio(unittest.TestCase):
    def test_lock_try_lock_and_a_cancelled_wait(self):
        a = Sidecar(self, None, unique("a"))
        b = Sidecar(self, None, unique("b"))
        name = unique("lock")

        async def main() -> None:
            ca, cb = baton.AsyncClient(a.addr), baton.AsyncClient(b.addr)
            self.assertTrue(await ca.healthy())
            with self.assertRaises(ValueError):
                await ca.lock(name, wait=601)
            async with await ca.lock(name) as held:
                self.assertGreater(held.token, 0)
                with self.assertRaises(baton.NotGranted):
                    await cb.try_lock(name)
                waiting = asyncio.ensure_future(cb.lock(name))
                while not (await ca.lock_state(name))["waiters"]:
                    await asyncio.sleep(0.02)
                waiting.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await asyncio.wait_for(waiting, BOUND)
                self.assertFalse(held.lost.is_set())
            self.assertEqual((await ca.lock_state(name))["waiters"], [])
            async with await cb.try_lock(name, ttl=30) as second:
                self.assertGreater(second.token, held.token)
            barrier = asyncio.ensure_future(ca.barrier(unique("barrier"), 2, 30))
            await asyncio.sleep(0.3)
            barrier.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await asyncio.wait_for(barrier, BOUND)

        asyncio.run(main())

    def test_leader_election_runs_on_the_loop_until_cancelled(self):
        election = unique("election")
        s = Sidecar(self, None, unique("a"), [election])

        async def main() -> None:
            c = baton.AsyncClient(s.addr)
            led: asyncio.Queue[int] = asyncio.Queue()
            ended: list[bool] = []

            async def lead(term: baton.AsyncTerm) -> None:
                await led.put(term.token)
                await term.ended.wait()
                ended.append(True)

            run = asyncio.ensure_future(c.run_leader_election(lead, election=election))
            self.assertGreater(await asyncio.wait_for(led.get(), BOUND), 0)
            run.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await asyncio.wait_for(run, BOUND)
            self.assertEqual(ended, [True])

        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
