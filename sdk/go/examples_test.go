package baton_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildExample compiles one of examples/ (the README's code) into the test's temp dir.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "./examples/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

func TestReadmeLockExample(t *testing.T) {
	s := startSidecar(t, "", unique("a"), nil)
	cmd := exec.Command(buildExample(t, "lock"))
	cmd.Env = append(os.Environ(), "BATON_SIDECAR="+s.addr)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "holding db with fencing token ") {
		t.Fatalf("%v: %s", err, out)
	}
	s.waitLog(`lock released lock=db`)
}

func TestReadmeLeaderExample(t *testing.T) {
	s := startSidecar(t, "", unique("a"), []string{unique("election")})
	cmd := exec.Command(buildExample(t, "leader"))
	cmd.Env = append(os.Environ(), "BATON_SIDECAR="+s.addr)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		if scanner.Scan() {
			lines <- scanner.Text()
		}
		close(lines)
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "leading with fencing token ") {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(bound):
		t.Fatal("the example never led")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the example's exit: %v", err)
	}
}

// snippet is the part of examples/NAME/main.go between the `// --- README ---` markers, each
// line without its indentation.
func snippet(t *testing.T, name string) []string {
	t.Helper()
	source, err := os.ReadFile(filepath.Join("examples", name, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(string(source), "// --- README ---")
	if len(parts) != 3 {
		t.Fatalf("examples/%s: want one README part between two markers", name)
	}
	return trimmedLines(parts[1])
}

func trimmedLines(text string) []string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// The READMEs show the examples as they are (so what they show compiles and runs above).
func TestReadmesShowTheExamples(t *testing.T) {
	for _, doc := range []struct {
		path     string
		examples []string
	}{
		{"README.md", []string{"leader", "lock"}},
		{"../../README.md", []string{"lock"}},
	} {
		text, err := os.ReadFile(doc.path)
		if err != nil {
			t.Fatal(err)
		}
		shown := "\n" + strings.Join(trimmedLines(string(text)), "\n") + "\n"
		for _, name := range doc.examples {
			want := "\n" + strings.Join(snippet(t, name), "\n") + "\n"
			if !strings.Contains(shown, want) {
				t.Errorf("%s does not show examples/%s as it is:\n%s", doc.path, name, want)
			}
		}
	}
}
