package tap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// relay copies the upstream's body to the client as it arrives (pipe.go)
// and says why it stopped. wt, when the request is recorded, sees every
// read after it was queued for the client: inspection never delays a byte.
func (p *Proxy) relay(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, r *http.Request, resp *http.Response, wt *watch) (End, *pipe) {
	pp := newPipe(p.o.StreamReserve, p.o.StreamBuffer, p.shared)
	var clientGone atomic.Bool
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		rc := http.NewResponseController(w)
		var cs []qchunk
		for {
			if cs = pp.take(ctx, cs); cs == nil {
				return
			}
			var err error
			for _, c := range cs {
				if _, err = w.Write(c.b); err != nil {
					break
				}
			}
			if err == nil {
				err = rc.Flush()
			}
			if h := p.o.onHop; h != nil && err == nil {
				now := time.Now()
				for i := range cs {
					h(now.Sub(cs[i].at))
				}
			}
			pp.written(cs)
			if err != nil {
				clientGone.Store(true)
				pp.fail()
				cancel() // the upstream sees the client leave, as without tap
				return
			}
		}
	}()

	var timedOut atomic.Bool
	var idle *time.Timer
	if p.o.IdleTimeout > 0 {
		idle = time.AfterFunc(p.o.IdleTimeout, func() { timedOut.Store(true); cancel() })
		defer idle.Stop()
	}
	var err error
	for {
		bp := p.bufs.Get().(*[]byte)
		var n int
		n, err = resp.Body.Read(*bp)
		at := time.Now()
		if n > 0 {
			if idle != nil {
				idle.Reset(p.o.IdleTimeout)
			}
			c := make([]byte, n)
			copy(c, (*bp)[:n])
			p.bufs.Put(bp)
			if !pp.push(ctx, c, at) {
				if err == nil {
					err = context.Canceled
				}
				break
			}
			if wt != nil {
				wt.read(c, at)
			}
		} else {
			p.bufs.Put(bp)
		}
		if err != nil {
			break
		}
	}
	pp.close()
	<-writerDone

	switch {
	case clientGone.Load() || r.Context().Err() != nil:
		return EndClientGone, pp
	case timedOut.Load():
		return EndTimeout, pp
	case resp.StatusCode >= 400:
		return EndHTTPError, pp
	case errors.Is(err, io.EOF):
		if wt == nil {
			return EndDone, pp // not inspected: only how it ended matters
		}
		return wt.end(), pp
	}
	return EndReset, pp
}

// watch reads one recorded response as it passes: an SSE stream event by
// event, or a whole body (up to MaxResponse) when it does not stream.
type watch struct {
	rec        *Record
	breakAfter time.Duration
	sse        bool
	sc         sseScanner
	at         time.Time // the current read's time
	content    bool      // the first content was seen
	last       time.Time // the last read after it
	badEvents  int
	unread     string // why the body is not inspected ("" when it is)

	body   []byte // a non-streamed body so far
	shared *budget
	taken  int64
	max    int
}

func (p *Proxy) watchFor(rec *Record, resp *http.Response) *watch {
	wt := &watch{rec: rec, breakAfter: p.o.BreakAfter, shared: p.shared, max: p.o.MaxResponse}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	wt.sse = ct == "text/event-stream"
	wt.sc.onEvent = wt.event
	switch {
	case resp.StatusCode >= 400:
		wt.unread = "-" // an error body may quote the prompt: not read
	case resp.Header.Get("Content-Encoding") != "" && resp.Header.Get("Content-Encoding") != "identity":
		wt.unread = "response body " + resp.Header.Get("Content-Encoding") + "-encoded"
	case !wt.sse && resp.ContentLength > int64(p.o.MaxResponse):
		wt.unread = "response body over " + size(int64(p.o.MaxResponse))
	}
	return wt
}

func (wt *watch) read(p []byte, at time.Time) {
	if wt.unread != "" {
		return
	}
	wt.at = at
	if wt.content {
		gap := at.Sub(wt.last)
		if g := wt.rec.MaxGap; g == nil || gap > *g {
			wt.rec.MaxGap = &gap
		}
		if gap >= wt.breakAfter {
			wt.rec.Breaks++
		}
		wt.last = at
	}
	if wt.sse {
		wt.sc.write(p)
		return
	}
	if !wt.content {
		wt.firstContent(at) // a body's content arrives with its first bytes
	}
	if len(wt.body)+len(p) > wt.max || !wt.shared.take(int64(len(p))) {
		wt.unread = "response body over " + size(int64(wt.max))
		wt.release()
		return
	}
	wt.taken += int64(len(p))
	wt.body = append(wt.body, p...)
}

func (wt *watch) release() {
	wt.shared.give(wt.taken)
	wt.taken, wt.body = 0, nil
}

func (wt *watch) firstContent(at time.Time) {
	wt.content, wt.last = true, at
	d := at.Sub(wt.rec.Arrived)
	wt.rec.TTFT = &d
}

// event takes one SSE event's data.
func (wt *watch) event(data []byte) {
	if bytes.Equal(data, []byte("[DONE]")) {
		wt.rec.SawDone = true
		return
	}
	if len(data) == 0 || data[0] != '{' {
		wt.badEvents++
		return
	}
	if wt.content && !mayEnd(data) {
		// After the first token most chunks carry only text: nothing to
		// read in them but that they came.
		wt.rec.Events++
		return
	}
	var c chunk
	if json.Unmarshal(data, &c) != nil {
		wt.badEvents++
		return
	}
	wt.rec.Events++
	if !wt.content && c.hasContent() {
		wt.firstContent(wt.at)
	}
	wt.apply(&c)
}

// mayEnd: the event may say more than "here is text" — a finish reason
// that is not null, usage, Dynamo's nvext, an error, a Responses API event
// — so it is decoded. A false answer is certain: each of those needs its
// key in the data.
func mayEnd(data []byte) bool {
	if i := bytes.Index(data, []byte(`"finish_reason"`)); i >= 0 && !nullAfter(data[i+len(`"finish_reason"`):]) {
		return true
	}
	if i := bytes.Index(data, []byte(`"usage"`)); i >= 0 && !nullAfter(data[i+len(`"usage"`):]) {
		return true
	}
	return bytes.Contains(data, []byte(`"nvext"`)) || bytes.Contains(data, []byte(`"error"`)) || bytes.Contains(data, []byte(`"type"`))
}

// nullAfter: what follows a key is `: null` (any spacing).
func nullAfter(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 || b[0] != ':' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(b[1:], " \t\r\n"), []byte("null"))
}

// apply takes what a chunk (or a whole body) says besides its content.
func (wt *watch) apply(c *chunk) {
	r := wt.rec
	if r.Model == "" && c.Model != "" {
		r.Model = clip(c.Model)
	}
	if f := c.finish(); f != "" {
		r.Finish = clip(f)
	}
	if u := c.usage(); u != nil {
		set := func(dst **int, v *int) {
			if v != nil && *v >= 0 {
				*dst = intp(*v)
			}
		}
		set(&r.PromptTokens, u.PromptTokens)
		set(&r.PromptTokens, u.InputTokens)
		set(&r.OutputTokens, u.CompletionTokens)
		set(&r.OutputTokens, u.OutputTokens)
		if d := u.PromptTokensDetails; d != nil {
			set(&r.CachedTokens, d.CachedTokens)
		}
		if d := u.InputTokensDetails; d != nil {
			set(&r.CachedTokens, d.CachedTokens)
		}
	}
	if n := c.Nvext; n != nil && n.WorkerID != nil && r.WorkerFrom == "" {
		// Dynamo names the decode worker (the prefill one when alone),
		// as kvtop names Dynamo's workers: worker_<id>.
		id := n.WorkerID.Decode
		if id == nil {
			id = n.WorkerID.Prefill
		}
		if id != nil {
			r.Worker, r.WorkerFrom = "worker_"+strconv.FormatUint(*id, 10), "nvext.worker_id"
		}
	}
}

// end is how a response that ended cleanly ended.
func (wt *watch) end() End {
	r := wt.rec
	if wt.unread != "" {
		return EndUnchecked
	}
	if !wt.sse {
		defer wt.release()
		var c chunk
		if json.Unmarshal(wt.body, &c) != nil {
			if len(bytes.TrimSpace(wt.body)) == 0 || !json.Valid(wt.body) {
				return EndUpstreamClosed // an empty or cut body
			}
			wt.unread = "response body is not a completion"
			return EndUnchecked
		}
		wt.apply(&c)
		if r.Finish != "" {
			return EndDone
		}
		return EndUpstreamClosed
	}
	// A stream ends properly with its finish reason and [DONE]; a
	// Responses API stream with response.completed (or .incomplete).
	if r.Finish != "" && (r.SawDone || r.Endpoint == "/v1/responses") && !wt.sc.finish() {
		return EndDone
	}
	return EndUpstreamClosed
}

// finish completes and hands over a recorded request.
func (p *Proxy) finish(r *Record, wt *watch, pp *pipe, end End) {
	r.Ended = time.Now()
	r.End = end
	r.ClientSlow, r.Stalled = pp.slowness()
	if wt != nil {
		wt.release()
		switch {
		case wt.unread != "" && wt.unread != "-":
			r.Unread = join(r.Unread, wt.unread)
		case wt.sc.skipped > 0:
			r.Unread = join(r.Unread, strconv.Itoa(wt.sc.skipped)+" events over "+size(maxEventBytes))
		}
		if wt.badEvents > 0 {
			r.Unread = join(r.Unread, strconv.Itoa(wt.badEvents)+" events not JSON")
		}
	}
	p.stats.count(r)
	p.o.Record(r)
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// clip bounds a string taken from the upstream.
func clip(s string) string {
	if len(s) > maxIDBytes {
		return s[:maxIDBytes]
	}
	return s
}
