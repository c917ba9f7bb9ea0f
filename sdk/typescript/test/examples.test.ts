import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Sidecar, bounded, unique } from "./harness.js";

// dist/test/ → the package's folder.
const PACKAGE = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

function runExample(name: string, addr: string) {
  return spawn(process.execPath, [join(PACKAGE, "dist", "examples", `${name}.js`)], {
    env: { ...process.env, BATON_SIDECAR: addr },
    stdio: ["ignore", "pipe", "inherit"],
  });
}

function firstLine(child: ReturnType<typeof runExample>): Promise<string> {
  return bounded(new Promise((resolve) => createInterface({ input: child.stdout! }).once("line", resolve)), "the example's first line");
}

function exitCode(child: ReturnType<typeof runExample>): Promise<number | null> {
  return bounded(new Promise((resolve) => child.on("exit", resolve)), "the example's exit");
}

test("the lock example runs", async (t) => {
  const s = await Sidecar.start(t, undefined, unique("a"));
  const child = runExample("lock", s.addr);
  const exited = exitCode(child);
  assert.match(await firstLine(child), /^holding db with fencing token \d+$/);
  assert.equal(await exited, 0);
  await s.waitLog("lock released lock=db");
});

test("the leader example runs", async (t) => {
  const s = await Sidecar.start(t, undefined, unique("a"), [unique("election")]);
  const child = runExample("leader", s.addr);
  const exited = exitCode(child);
  assert.match(await firstLine(child), /^leading with fencing token \d+$/);
  child.kill("SIGTERM");
  assert.equal(await exited, 0);
});

/** The lines of examples/NAME.ts between the `// --- README ---` markers, trimmed. */
function snippet(name: string): string[] {
  const parts = readFileSync(join(PACKAGE, "examples", `${name}.ts`), "utf8").split("// --- README ---");
  assert.equal(parts.length, 3, `examples/${name}.ts: want one README part between two markers`);
  return trimmed(parts[1]);
}

function trimmed(text: string): string[] {
  return text.split("\n").map((l) => l.trim()).filter((l) => l !== "");
}

test("the READMEs show the examples as they are", () => {
  for (const [path, names] of [
    [join(PACKAGE, "README.md"), ["leader", "lock"]],
    [join(PACKAGE, "..", "..", "README.md"), ["lock"]],
  ] as const) {
    const shown = `\n${trimmed(readFileSync(path, "utf8")).join("\n")}\n`;
    for (const name of names) {
      assert.ok(shown.includes(`\n${snippet(name).join("\n")}\n`), `${path} does not show examples/${name}.ts as it is`);
    }
  }
});
