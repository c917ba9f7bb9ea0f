package dev.baton.sdk;

import static dev.baton.sdk.Harness.BOUND;
import static dev.baton.sdk.Harness.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.baton.sdk.Harness.Sidecar;
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The README's examples (src/test/java/dev/baton/sdk/examples: out of the main jar) run, and are shown as they are. */
class ExamplesTest {
  private static final Path PACKAGE = Path.of(System.getProperty("user.dir"));

  private static Process run(String example, Sidecar sidecar) throws Exception {
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    ProcessBuilder pb =
        new ProcessBuilder(java, "-cp", PACKAGE.resolve("target/classes") + File.pathSeparator + PACKAGE.resolve("target/test-classes"), "dev.baton.sdk.examples." + example)
            .redirectError(ProcessBuilder.Redirect.INHERIT);
    pb.environment().put("BATON_SIDECAR", sidecar.addr);
    return pb.start();
  }

  private static String firstLine(Process p) throws Exception {
    BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
    return java.util.concurrent.CompletableFuture.supplyAsync(
            () -> {
              try {
                return out.readLine();
              } catch (java.io.IOException e) {
                return null;
              }
            })
        .get(BOUND.toMillis(), TimeUnit.MILLISECONDS);
  }

  @Test
  void lockExampleRuns() throws Exception {
    try (Sidecar s = new Sidecar(null, unique("a"), List.of())) {
      Process p = run("LockExample", s);
      String line = firstLine(p);
      assertTrue(line != null && line.matches("holding db with fencing token \\d+"), line);
      assertTrue(p.waitFor(BOUND.toMillis(), TimeUnit.MILLISECONDS));
      assertEquals(0, p.exitValue());
      s.waitLog("lock released lock=db");
    }
  }

  @Test
  void leaderExampleRuns() throws Exception {
    try (Sidecar s = new Sidecar(null, unique("a"), List.of(unique("election")))) {
      Process p = run("LeaderExample", s);
      try {
        String line = firstLine(p);
        assertTrue(line != null && line.matches("leading with fencing token \\d+"), line);
        p.destroy(); // SIGTERM: the shutdown hook closes the selector
        assertTrue(p.waitFor(BOUND.toMillis(), TimeUnit.MILLISECONDS));
        assertEquals(143, p.exitValue(), "the JVM's exit after SIGTERM");
      } finally {
        p.destroyForcibly();
      }
    }
  }

  /** The lines of an example between the `// --- README ---` markers, trimmed. */
  private static List<String> snippet(String example) throws Exception {
    String source = Files.readString(PACKAGE.resolve("src/test/java/dev/baton/sdk/examples/" + example + ".java"));
    String[] parts = source.split("// --- README ---", -1);
    assertEquals(3, parts.length, example + ": want one README part between two markers");
    return trimmed(parts[1]);
  }

  private static List<String> trimmed(String text) {
    List<String> out = new ArrayList<>();
    for (String l : text.split("\n")) if (!l.isBlank()) out.add(l.strip());
    return out;
  }

  @Test
  void readmesShowTheExamplesAsTheyAre() throws Exception {
    for (var doc : List.of(
        List.of(PACKAGE.resolve("README.md").toString(), "LeaderExample", "LockExample"),
        List.of(PACKAGE.resolve("../../README.md").toString(), "LockExample"))) {
      String shown = "\n" + String.join("\n", trimmed(Files.readString(Path.of(doc.get(0))))) + "\n";
      for (String example : doc.subList(1, doc.size())) {
        String want = "\n" + String.join("\n", snippet(example)) + "\n";
        assertTrue(shown.contains(want), doc.get(0) + " does not show " + example + " as it is:\n" + want);
      }
    }
  }
}
