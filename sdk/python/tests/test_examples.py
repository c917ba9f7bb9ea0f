import os
import signal
import subprocess
import sys
import unittest

from harness import BOUND, Sidecar, unique

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)


def run_env(sidecar: Sidecar) -> dict:
    return dict(os.environ, BATON_SIDECAR=sidecar.addr, PYTHONPATH=PACKAGE)


def snippet(name: str) -> list:
    """The lines of examples/NAME.py between the `# --- README ---` markers, stripped."""
    with open(os.path.join(PACKAGE, "examples", name + ".py")) as f:
        parts = f.read().split("# --- README ---")
    assert len(parts) == 3, f"examples/{name}.py: want one README part between two markers"
    return trimmed(parts[1])


def trimmed(text: str) -> list:
    return [line.strip() for line in text.splitlines() if line.strip()]


class Examples(unittest.TestCase):
    def test_lock_example_runs(self):
        s = Sidecar(self, None, unique("a"))
        out = subprocess.run([sys.executable, "-S", os.path.join(PACKAGE, "examples", "lock.py")], env=run_env(s),
                             check=False, capture_output=True, text=True, timeout=BOUND)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("holding db with fencing token "), out.stdout)
        s.wait_log("lock released lock=db")

    def test_leader_example_runs(self):
        s = Sidecar(self, None, unique("a"), [unique("election")])
        proc = subprocess.Popen([sys.executable, "-S", os.path.join(PACKAGE, "examples", "leader.py")], env=run_env(s),
                                stdout=subprocess.PIPE, text=True)
        self.addCleanup(proc.kill)
        line = proc.stdout.readline()
        self.assertTrue(line.startswith("leading with fencing token "), line)
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(BOUND), 0)
        proc.stdout.close()

    def test_readmes_show_the_examples(self):
        for path, names in [(os.path.join(PACKAGE, "README.md"), ["leader", "lock"]),
                            (os.path.join(PACKAGE, "..", "..", "README.md"), ["lock"])]:
            with open(path) as f:
                shown = "\n" + "\n".join(trimmed(f.read())) + "\n"
            for name in names:
                want = "\n" + "\n".join(snippet(name)) + "\n"
                self.assertIn(want, shown, f"{path} does not show examples/{name}.py as it is")


if __name__ == "__main__":
    unittest.main()
