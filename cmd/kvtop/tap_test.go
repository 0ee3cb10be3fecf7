package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// kvtop tap as an operator runs it: it says where it listens, forwards a
// stream byte for byte, appends a kvtop audit outcome line per request to
// --out, and on Ctrl-C says what it saw. The line holds no prompt text and
// no Authorization.
func TestTapCommand(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"WORDS\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n" +
		"data: [DONE]\n\n"
	var gotAuth string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, stream)
	}))
	defer up.Close()
	out := filepath.Join(t.TempDir(), "tap.jsonl")
	cmd := exec.Command(buildKvtop(t), "tap", "--listen", "127.0.0.1:0", "--upstream", up.URL, "--out", out, "--name", "t0")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	errs := bufio.NewReader(stderr)
	first, err := errs.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`tap t0: (http://127\.0\.0\.1:\d+) → `).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("first line %q does not say where it listens", first)
	}
	req, _ := http.NewRequest(http.MethodPost, m[1]+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"PROMPT-WORDS"}]}`))
	req.Header.Set("Authorization", "Bearer sk-SECRET")
	req.Header.Set("X-Request-Id", "r-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != stream || gotAuth != "Bearer sk-SECRET" {
		t.Fatalf("client got %q; upstream got Authorization %q", body, gotAuth)
	}
	cmd.Process.Signal(syscall.SIGINT)
	rest, _ := io.ReadAll(errs)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v\n%s", err, rest)
	}
	if !strings.Contains(string(rest), "1 requests, 1 recorded: 1 finished, 0 truncated") {
		t.Fatalf("summary: %q", rest)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(data), &rec); err != nil {
		t.Fatalf("%q: %v", data, err)
	}
	if rec["kind"] != "outcome" || rec["observer"] != "client" || rec["request_id"] != "r-1" || rec["end"] != "done" || rec["done"] != true || rec["tap"] != "t0" {
		t.Fatalf("record %s", data)
	}
	for _, s := range []string{"SECRET", "Bearer", "PROMPT", "WORDS"} {
		if bytes.Contains(data, []byte(s)) {
			t.Fatalf("record holds %q: %s", s, data)
		}
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Fatalf("--out mode %v, want 0600", fi.Mode().Perm())
	}
}

// A tap listening beyond loopback without TLS warns that credentials cross
// the network in clear; a bad flag is a usage error.
func TestTapCommandWarnsAndRefuses(t *testing.T) {
	_, stderr, code := runKvtop(t, nil, "tap", "--upstream", "ftp://x")
	if code != exitUsage || !strings.Contains(stderr, `upstream "ftp://x": want http://host:port`) {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	cmd := exec.Command(buildKvtop(t), "tap", "--listen", "0.0.0.0:0", "--upstream", "http://127.0.0.1:1")
	errp, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(errp).ReadString('\n')
	if !strings.Contains(line, "warning: listening on 0.0.0.0:0 without TLS: clients' Authorization headers and prompts cross the network in clear") {
		t.Fatalf("first line %q", line)
	}
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("tap did not stop on SIGINT")
	}
}
