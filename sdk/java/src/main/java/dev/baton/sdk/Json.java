package dev.baton.sdk;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The sidecar's JSON, read into maps, lists, strings, longs, doubles, booleans and null (the
 * standard library has no JSON reader; the API's answers are small and flat).
 */
final class Json {
  private final String s;
  private int at;

  private Json(String s) {
    this.s = s;
  }

  /** Parses one JSON value; IllegalArgumentException when it is not JSON. */
  static Object parse(String text) {
    Json p = new Json(text);
    p.space();
    Object v = p.value();
    p.space();
    if (p.at != p.s.length()) throw p.error("trailing characters");
    return v;
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> object(Object v) {
    return v instanceof Map ? (Map<String, Object>) v : Map.of();
  }

  static Map<String, Object> object(Map<String, Object> m, String key) {
    return object(m.get(key));
  }

  static String string(Map<String, Object> m, String key) {
    Object v = m.get(key);
    return v instanceof String ? (String) v : null;
  }

  static long number(Map<String, Object> m, String key) {
    Object v = m.get(key);
    return v instanceof Number ? ((Number) v).longValue() : 0;
  }

  /** An integer that may be absent or null (then null). */
  static Integer integer(Map<String, Object> m, String key) {
    Object v = m.get(key);
    return v instanceof Number ? ((Number) v).intValue() : null;
  }

  static boolean bool(Map<String, Object> m, String key) {
    return Boolean.TRUE.equals(m.get(key));
  }

  private IllegalArgumentException error(String why) {
    return new IllegalArgumentException("not JSON at " + at + ": " + why);
  }

  private void space() {
    while (at < s.length() && Character.isWhitespace(s.charAt(at))) at++;
  }

  private Object value() {
    if (at >= s.length()) throw error("end of input");
    char c = s.charAt(at);
    switch (c) {
      case '{':
        return obj();
      case '[':
        return arr();
      case '"':
        return str();
      case 't':
        return word("true", Boolean.TRUE);
      case 'f':
        return word("false", Boolean.FALSE);
      case 'n':
        return word("null", null);
      default:
        return num();
    }
  }

  private Object word(String w, Object v) {
    if (!s.startsWith(w, at)) throw error("expected " + w);
    at += w.length();
    return v;
  }

  private Map<String, Object> obj() {
    Map<String, Object> m = new LinkedHashMap<>();
    at++;
    space();
    if (peek('}')) return m;
    while (true) {
      space();
      String k = str();
      space();
      expect(':');
      space();
      m.put(k, value());
      space();
      if (peek('}')) return m;
      expect(',');
    }
  }

  private List<Object> arr() {
    List<Object> l = new ArrayList<>();
    at++;
    space();
    if (peek(']')) return l;
    while (true) {
      space();
      l.add(value());
      space();
      if (peek(']')) return l;
      expect(',');
    }
  }

  private boolean peek(char c) {
    if (at < s.length() && s.charAt(at) == c) {
      at++;
      return true;
    }
    return false;
  }

  private void expect(char c) {
    if (!peek(c)) throw error("expected " + c);
  }

  private String str() {
    expect('"');
    StringBuilder b = new StringBuilder();
    while (true) {
      if (at >= s.length()) throw error("unterminated string");
      char c = s.charAt(at++);
      if (c == '"') return b.toString();
      if (c != '\\') {
        b.append(c);
        continue;
      }
      if (at >= s.length()) throw error("unterminated escape");
      char e = s.charAt(at++);
      switch (e) {
        case 'n':
          b.append('\n');
          break;
        case 't':
          b.append('\t');
          break;
        case 'r':
          b.append('\r');
          break;
        case 'b':
          b.append('\b');
          break;
        case 'f':
          b.append('\f');
          break;
        case 'u':
          if (at + 4 > s.length()) throw error("short \\u escape");
          b.append((char) Integer.parseInt(s.substring(at, at + 4), 16));
          at += 4;
          break;
        default:
          b.append(e);
      }
    }
  }

  private Object num() {
    int start = at;
    while (at < s.length() && "+-0123456789.eE".indexOf(s.charAt(at)) >= 0) at++;
    String n = s.substring(start, at);
    if (n.isEmpty()) throw error("unexpected character");
    try {
      if (n.contains(".") || n.contains("e") || n.contains("E")) return Double.parseDouble(n);
      return Long.parseLong(n);
    } catch (NumberFormatException e) {
      throw error("bad number " + n);
    }
  }
}
