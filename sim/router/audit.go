package router

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// The kvtop routing audit record (PROTOCOLS.md §4): one decision and one
// outcome per attempt, joined by request_id + attempt_id. Metadata only:
// never prompt content.

type prediction struct {
	Source    string  `json:"source"`
	Input     string  `json:"input"`
	Units     string  `json:"units"`
	Matched   int     `json:"matched"`
	Total     int     `json:"total"`
	Owner     string  `json:"owner"`
	BlockSize int     `json:"block_size"`
	AgeMS     *int64  `json:"age_ms"`
	Score     float64 `json:"-"`
}

type loadRec struct {
	Kind  string `json:"kind"`
	Value int    `json:"value"`
	Scope string `json:"scope"`
}

type candidate struct {
	Worker  string  `json:"worker"`
	Score   float64 `json:"score"`
	Matched int     `json:"matched"`
	Load    int     `json:"load"`
}

type decisionRec struct {
	Kind          string      `json:"kind"`
	TS            string      `json:"ts"`
	RequestID     string      `json:"request_id"`
	AttemptID     string      `json:"attempt_id"`
	Router        string      `json:"router"`
	RouterVersion string      `json:"router_version"`
	Model         string      `json:"model"`
	Pool          string      `json:"pool"`
	Endpoint      string      `json:"endpoint"`
	Prediction    prediction  `json:"prediction"`
	Chosen        string      `json:"chosen"`
	Reason        string      `json:"reason"`
	Load          loadRec     `json:"load"`
	Prefix        string      `json:"prefix,omitempty"`
	Candidates    []candidate `json:"candidates"`
}

// noPrediction is the prediction of a router that makes none.
type noPrediction struct {
	Source string `json:"source"`
	Input  string `json:"input"`
}

// blindRec is a cache-blind router's decision: no prediction, no
// candidates (the embedded fields of those names are shadowed).
type blindRec struct {
	decisionRec
	Prediction noPrediction `json:"prediction"`
	Candidates []candidate  `json:"candidates,omitempty"`
}

type outcomeRec struct {
	Kind         string   `json:"kind"`
	TS           string   `json:"ts"`
	RequestID    string   `json:"request_id"`
	AttemptID    string   `json:"attempt_id"`
	Worker       string   `json:"worker"`
	HTTPStatus   int      `json:"http_status"`
	PromptTokens *int     `json:"prompt_tokens"`
	CachedTokens *int     `json:"cached_tokens"`
	QueueMS      *float64 `json:"queue_ms"`
	TTFTMS       *float64 `json:"ttft_ms"`
	E2EMS        *float64 `json:"e2e_ms"`
	FinishReason *string  `json:"finish_reason"`
	Done         bool     `json:"done"`
	Error        *string  `json:"error"`
	RetryOf      *string  `json:"retry_of"`
}

// audit appends records to the decisions file. Lines are flushed by flush
// (once per clock quantum) so a tailer sees them promptly. Past limit bytes
// the file is rotated (renamed to path.1, as logrotate would) so a long demo
// does not fill the disk; kvtop's tailer follows rotation.
//
// With gz it writes as Dynamo's gzip trace sink does: path is the sink's
// prefix, lines go to segments path.NNNNNN.jsonl.gz (from the first index
// not on disk), each flush appends one whole gzip member (at most one a
// second, as the sink's 1 s flush interval), and a segment past limit
// uncompressed bytes rolls to the next index.
type audit struct {
	mu    sync.Mutex // the HTTP face writes from its own goroutines (front.go)
	path  string
	limit int64
	f     *os.File
	w     *bufio.Writer
	cw    countingWriter
	enc   *json.Encoder
	dirty bool
	err   error

	gz       bool
	seg      int          // the segment being written
	mem      bytes.Buffer // the lines of the next member
	segBytes int64        // uncompressed bytes in the segment
	memAt    time.Time    // when the last member was written
}

// auditLimit is the decisions file size that triggers a rotation.
const auditLimit = 64 << 20

type countingWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func openAudit(path string, gz bool) (*audit, error) {
	a := &audit{path: path, limit: auditLimit, gz: gz}
	if gz {
		for {
			if _, err := os.Stat(a.segment()); os.IsNotExist(err) {
				break
			}
			a.seg++
		}
	}
	if err := a.open(); err != nil {
		return nil, err
	}
	return a, nil
}

// segment is the gzip segment being written.
func (a *audit) segment() string { return fmt.Sprintf("%s.%06d.jsonl.gz", a.path, a.seg) }

func (a *audit) open() error {
	if a.gz {
		f, err := os.OpenFile(a.segment(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		a.f, a.segBytes = f, 0
		a.enc = json.NewEncoder(&a.mem)
		return nil
	}
	f, err := os.OpenFile(a.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	a.f, a.w = f, bufio.NewWriterSize(f, 64<<10)
	a.cw = countingWriter{w: a.w, n: st.Size()}
	a.enc = json.NewEncoder(&a.cw)
	return nil
}

func (a *audit) write(v any) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return
	}
	a.err = a.enc.Encode(v) // Encode ends the line
	a.dirty = true
}

// line writes one text line (a router's text log); b has no newline.
func (a *audit) line(b []byte) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return
	}
	var w io.Writer = &a.cw
	if a.gz {
		w = &a.mem
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		a.err = err
	}
	a.dirty = true
}

// flush writes what was written since the last flush; now paces the gzip
// members (force: write one now, as at close).
func (a *audit) flush(now time.Time, force bool) error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked(now, force)
}

func (a *audit) flushLocked(now time.Time, force bool) error {
	if !a.dirty {
		return a.err
	}
	if a.gz {
		if !force && now.Sub(a.memAt) < time.Second && a.mem.Len() < 1<<20 {
			return a.err
		}
		a.dirty, a.memAt = false, now
		if a.err == nil {
			a.err = a.member()
		}
		return a.err
	}
	a.dirty = false
	if err := a.w.Flush(); err != nil && a.err == nil {
		a.err = err
	}
	if a.err == nil && a.cw.n > a.limit {
		a.err = a.rotate()
	}
	return a.err
}

// member appends the buffered lines to the segment as one gzip member
// (written whole: a reader never sees a member's start without its end
// for long), and rolls the segment past the limit.
func (a *audit) member() error {
	if a.mem.Len() == 0 {
		return nil
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(a.mem.Bytes()); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if _, err := a.f.Write(z.Bytes()); err != nil {
		return err
	}
	a.segBytes += int64(a.mem.Len())
	a.mem.Reset()
	if a.segBytes > a.limit {
		if err := a.f.Close(); err != nil {
			return err
		}
		a.seg++
		return a.open()
	}
	return nil
}

func (a *audit) rotate() error {
	if err := a.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(a.path, a.path+".1"); err != nil {
		return err
	}
	return a.open()
}

func (a *audit) close() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dirty = true
	err := a.flushLocked(time.Time{}, true)
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// stamp formats a record time: RFC 3339, UTC, milliseconds.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func ms(d time.Duration) *float64 {
	v := float64(d.Microseconds()/100) / 10 // 0.1 ms resolution
	return &v
}
