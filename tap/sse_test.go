package tap

import (
	"reflect"
	"strings"
	"testing"
)

// However the network splits a stream (any byte boundary, \n or \r\n
// line ends), the same events come out; an event cut by the end of the
// stream is not dispatched and is reported.
func TestSSEScannerAnySplit(t *testing.T) {
	stream := ": keep-alive\r\n\r\n" +
		"event: x\r\ndata: {\"a\":1}\r\n\r\n" +
		"data: line one\ndata:line two\n\n" +
		"id: 7\nretry: 10\n\n" + // no data: no event
		"data: [DONE]\n\n" +
		"data: cut"
	want := []string{`{"a":1}`, "line one\nline two", "[DONE]"}
	for cut := 0; cut <= len(stream); cut++ {
		for _, step := range []int{1, 2, 7, len(stream)} {
			var got []string
			s := sseScanner{onEvent: func(d []byte) { got = append(got, string(d)) }}
			s.write([]byte(stream[:cut]))
			for rest := stream[cut:]; len(rest) > 0; {
				n := min(step, len(rest))
				s.write([]byte(rest[:n]))
				rest = rest[n:]
			}
			if !reflect.DeepEqual(got, want) || !s.finish() {
				t.Fatalf("cut %d step %d: got %q (partial %v), want %q", cut, step, got, s.finish(), want)
			}
		}
	}
}

// An event larger than maxEventBytes is skipped and counted; the ones
// after it are read.
func TestSSEScannerOversize(t *testing.T) {
	var got []string
	s := sseScanner{onEvent: func(d []byte) { got = append(got, string(d)) }}
	s.write([]byte("data: " + strings.Repeat("x", maxEventBytes+10) + "\n\n"))
	s.write([]byte("data: ok\n\n"))
	if !reflect.DeepEqual(got, []string{"ok"}) || s.skipped != 1 {
		t.Fatalf("got %q, skipped %d", got, s.skipped)
	}
}

// Two prompts that share their first 128 characters share their first two
// fingerprint hashes and no more; the model seeds the chain; a prompt
// shorter than a chunk has none; the key changes every hash.
func TestFingerprint(t *testing.T) {
	key := []byte("k")
	fp := func(model string, parts ...string) []string {
		f := newFingerprinter(key, model)
		for _, p := range parts {
			f.write(p)
		}
		return f.sum()
	}
	shared := strings.Repeat("é", 128) // characters, not bytes
	a := fp("m", shared, strings.Repeat("a", 200))
	b := fp("m", shared[:10], shared[10:], strings.Repeat("b", 200)) // fed in other pieces
	if len(a) != 5 || len(b) != 5 || a[0] != b[0] || a[1] != b[1] || a[2] == b[2] {
		t.Fatalf("a %v\nb %v", a, b)
	}
	if c := fp("other", shared); c[0] == a[0] {
		t.Fatal("another model, same hashes")
	}
	if d := fp("m", strings.Repeat("x", FPChunkChars-1)); d != nil {
		t.Fatalf("a short prompt has hashes: %v", d)
	}
	if long := fp("m", strings.Repeat("x", 10*FPChunkChars)); len(long) != FPChunks {
		t.Fatalf("%d hashes, want at most %d", len(long), FPChunks)
	}
	f := newFingerprinter([]byte("other key"), "m")
	f.write(shared)
	if f.sum()[0] == a[0] {
		t.Fatal("another key, same hashes")
	}
}

// After the first token, chunks are read only when they may end the
// stream; the test is exact for either JSON spacing, so a finish reason
// written as Python's json.dumps writes it is never missed.
func TestMayEnd(t *testing.T) {
	for data, want := range map[string]bool{
		`{"choices":[{"delta":{"content":"x"},"finish_reason":null}]}`:      false,
		`{"choices":[{"delta":{"content":"x"}, "finish_reason": null}]}`:    false,
		`{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}`:    true,
		`{"choices": [{"delta": {}, "finish_reason": "length"}]}`:           true,
		`{"choices":[],"usage":{"prompt_tokens":3}}`:                        true,
		`{"choices":[{"delta":{"content":"x"}}],"usage": null}`:             false,
		`{"choices":[{"delta":{"content":"x"}}],"nvext":{"worker_id":{}}}`:  true,
		`{"error":{"message":"overloaded"}}`:                                true,
		`{"type":"response.completed","response":{"status":"completed"}}`:   true,
		`{"choices":[{"delta":{"content":"finish_reason usage"}}]}`:         false,
		`{"choices":[{"delta":{"content":"\"finish_reason\": \"stop\""}}]}`: false, // quotes in text are escaped: no key
	} {
		if got := mayEnd([]byte(data)); got != want {
			t.Errorf("mayEnd(%s) = %v, want %v", data, got, want)
		}
	}
}
