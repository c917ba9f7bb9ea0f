package dev.baton.sdk;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Timer;
import java.util.TimerTask;

/**
 * HTTP to the sidecar with java.net.http: plain calls bounded by their wait plus a slack, and
 * text/event-stream answers read with an idle timeout (the sidecar sends {@code : keep-alive}
 * every 10 s, so a longer silence is a hung sidecar or a cut connection).
 */
final class Transport {
  /** How far beyond the wait a call may go before it is taken as hung. */
  static final Duration CALL_SLACK = Duration.ofSeconds(10);

  /** One daemon timer for every stream's idle watchdog. */
  static final Timer WATCHDOG = new Timer("baton-stream-watchdog", true);

  private final String base;
  private final HttpClient http;

  Transport(String base) {
    this.base = base;
    // HTTP/1.1 only: the sidecar speaks it, and an h2c upgrade offer would only add a round.
    this.http =
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(5))
            .proxy(HttpClient.Builder.NO_PROXY)
            .build();
  }

  static String duration(Duration d) {
    long ms = d.toMillis();
    return ms % 1000 == 0 ? (ms / 1000) + "s" : ms + "ms";
  }

  static Instant time(Object v) {
    return v instanceof String && !((String) v).isEmpty() ? Instant.parse((String) v) : null;
  }

  /** A query of parameter and value pairs (names from {@link Api}); a null value is left out. */
  static Map<String, String> query(String... pairs) {
    Map<String, String> built = new LinkedHashMap<>();
    for (int i = 0; i + 1 < pairs.length; i += 2) if (pairs[i + 1] != null) built.put(pairs[i], pairs[i + 1]);
    return built;
  }

  /** The operation's path for name (an election, lock, semaphore or barrier name). */
  static String path(Api.Operation op, String name) {
    return op.path().replace("{name}", segment(name == null ? "" : name));
  }

  private URI uri(Api.Operation op, String name, Map<String, String> query) {
    StringBuilder u = new StringBuilder(base).append(path(op, name));
    char sep = '?';
    if (query != null) {
      for (Map.Entry<String, String> e : query.entrySet()) {
        u.append(sep).append(e.getKey()).append('=');
        u.append(URLEncoder.encode(e.getValue(), StandardCharsets.UTF_8));
        sep = '&';
      }
    }
    return URI.create(u.toString());
  }

  static String segment(String name) {
    return URLEncoder.encode(name, StandardCharsets.UTF_8).replace("+", "%20");
  }

  private static BatonException error(int status, String body) {
    try {
      Map<String, Object> err = Json.object(Json.object(Json.parse(body)), "error");
      String code = Json.string(err, "code");
      if (code != null) return BatonException.of(status, code, String.valueOf(err.get("message")));
    } catch (IllegalArgumentException notJson) {
      // not the error envelope
    }
    return new BatonException(status, String.valueOf(status), body.strip());
  }

  /** One request of op for name; the 2xx answer's JSON object, or the code's exception thrown. */
  Map<String, Object> call(Api.Operation op, String name, Map<String, String> query, Duration wait)
      throws BatonException, IOException, InterruptedException {
    HttpRequest request =
        HttpRequest.newBuilder(uri(op, name, query))
            .method(op.method(), HttpRequest.BodyPublishers.noBody())
            .timeout(wait.plus(CALL_SLACK))
            .build();
    HttpResponse<String> response = http.send(request, HttpResponse.BodyHandlers.ofString());
    if (response.statusCode() / 100 != 2) throw error(response.statusCode(), response.body());
    String body = response.body();
    return body.isEmpty() ? Map.of() : Json.object(Json.parse(body));
  }

  /** {@link #call} without blocking: the answer, or the code's exception, as a future. */
  java.util.concurrent.CompletableFuture<Map<String, Object>> callAsync(
      Api.Operation op, String name, Map<String, String> query, Duration timeout) {
    HttpRequest request =
        HttpRequest.newBuilder(uri(op, name, query))
            .method(op.method(), HttpRequest.BodyPublishers.noBody())
            .timeout(timeout)
            .build();
    return http.sendAsync(request, HttpResponse.BodyHandlers.ofString())
        .thenApply(
            response -> {
              if (response.statusCode() / 100 != 2) {
                throw new java.util.concurrent.CompletionException(
                    error(response.statusCode(), response.body()));
              }
              String body = response.body();
              return body.isEmpty() ? Map.<String, Object>of() : Json.object(Json.parse(body));
            });
  }

  /** Opens the event stream of op for name; a refusal before it starts throws the code's exception. */
  EventStream stream(Api.Operation op, String name, Map<String, String> query, Duration wait, Duration idle)
      throws BatonException, IOException, InterruptedException {
    String method = op.method();
    String path = path(op, name);
    // No request timeout: it would end the stream itself. The grant's wait is bounded below.
    HttpRequest request =
        HttpRequest.newBuilder(uri(op, name, query))
            .method(method, HttpRequest.BodyPublishers.noBody())
            .header("Accept", "text/event-stream")
            .build();
    var pending = http.sendAsync(request, HttpResponse.BodyHandlers.ofInputStream());
    HttpResponse<InputStream> response;
    try {
      response = pending.get(wait.plus(CALL_SLACK).toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
    } catch (java.util.concurrent.TimeoutException e) {
      pending.cancel(true);
      throw new IOException(method + " " + path + ": no answer within " + wait.plus(CALL_SLACK), e);
    } catch (java.util.concurrent.ExecutionException e) {
      throw e.getCause() instanceof IOException ? (IOException) e.getCause() : new IOException(e.getCause());
    } catch (InterruptedException e) {
      pending.cancel(true);
      throw e;
    }
    if (response.statusCode() / 100 != 2) {
      try (InputStream in = response.body()) {
        throw error(response.statusCode(), new String(in.readAllBytes(), StandardCharsets.UTF_8));
      }
    }
    String type = response.headers().firstValue("content-type").orElse("");
    if (!type.startsWith("text/event-stream")) {
      response.body().close();
      throw new BatonException(response.statusCode(), "NotAStream", path + " answered " + type);
    }
    return new EventStream(response.body(), idle);
  }

  /** One server-sent event: its name and its data (JSON in every stream of the API). */
  static final class Event {
    final String name;
    final Map<String, Object> data;

    Event(String name, Map<String, Object> data) {
      this.name = name;
      this.data = data;
    }
  }

  /** A text/event-stream being read; close() from any thread ends a blocked next(). */
  static final class EventStream implements AutoCloseable {
    private final InputStream body;
    private final BufferedReader lines;
    private final long idleMs;
    private volatile long lastRead = System.nanoTime();
    private volatile boolean expired;
    private final TimerTask watchdog;

    EventStream(InputStream body, Duration idle) {
      this.body = body;
      this.lines = new BufferedReader(new InputStreamReader(body, StandardCharsets.UTF_8));
      this.idleMs = idle.toMillis();
      this.watchdog =
          new TimerTask() {
            @Override
            public void run() {
              if ((System.nanoTime() - lastRead) / 1_000_000 > idleMs) {
                expired = true;
                close();
              }
            }
          };
      WATCHDOG.schedule(watchdog, Math.max(idleMs / 4, 10), Math.max(idleMs / 4, 10));
    }

    /** The next event; null when the sidecar ended the stream; IOException when it broke. */
    Event next() throws IOException {
      String name = "";
      List<String> data = new ArrayList<>();
      while (true) {
        String line;
        try {
          line = lines.readLine();
        } catch (IOException e) {
          if (expired) throw new IOException("the stream fell silent (no keep-alive)", e);
          throw e;
        }
        if (line == null) {
          if (expired) throw new IOException("the stream fell silent (no keep-alive)");
          return null;
        }
        lastRead = System.nanoTime();
        if (line.isEmpty()) {
          if (!name.isEmpty() || !data.isEmpty()) {
            String text = String.join("\n", data);
            Map<String, Object> parsed = text.isEmpty() ? Map.of() : Json.object(Json.parse(text));
            return new Event(name.isEmpty() ? "message" : name, parsed);
          }
        } else if (!line.startsWith(":")) {
          int colon = line.indexOf(':');
          String field = colon < 0 ? line : line.substring(0, colon);
          String value = colon < 0 ? "" : line.substring(colon + 1);
          if (value.startsWith(" ")) value = value.substring(1);
          if (field.equals("event")) name = value;
          else if (field.equals("data")) data.add(value);
        }
      }
    }

    @Override
    public void close() {
      watchdog.cancel();
      try {
        body.close();
      } catch (IOException ignored) {
        // closing is all that is wanted
      }
    }
  }
}
