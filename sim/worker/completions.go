package worker

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// The worker's OpenAI-compatible face, as seed 000's synthetic HTTP worker:
// no model behind it, a stream timed by a small rule — the first token
// after a prefill of FirstToken plus 20 µs per prompt token (4 characters)
// and the worker's extra first-token delay, then a token every ITL — so
// that the times a client sees can be told apart (headers, first token,
// end). Its cached tokens come from the prompt's 64-character blocks it
// saw before. It can cut streams before their finish_reason and
// data: [DONE], the way seed 000's worker cut its third stream. These
// requests do not enter the simulated engines: no KV events are published
// for them.
const (
	FirstToken    = 30 * time.Millisecond
	ITL           = 15 * time.Millisecond
	defaultTokens = 16
	maxTokens     = 512
	cacheBlock    = 64 // characters per remembered prompt block
	maxRemembered = 1 << 16
)

// completions is the state of the HTTP face.
type completions struct {
	firstDelay atomic.Int64 // extra before the first token (a slow worker)
	cutEvery   atomic.Int64 // cut every n-th stream (0: none)
	streams    atomic.Int64 // streams started
	mu         sync.Mutex
	seen       map[uint64]bool // prompt block hashes (chained), bounded
}

// SetFirstTokenDelay delays every first token by d more (0 turns it off).
func (w *Worker) SetFirstTokenDelay(d time.Duration) { w.http.firstDelay.Store(int64(d)) }

// CutEvery makes every n-th stream from now on end without finish_reason
// and data: [DONE]: HTTP 200, the connection closed cleanly (0 turns it
// off). The count starts afresh.
func (w *Worker) CutEvery(n int) {
	w.http.streams.Store(0)
	w.http.cutEvery.Store(int64(n))
}

type chatRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	MaxTokens     *int   `json:"max_tokens"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Prompt string `json:"prompt"`
}

func (w *Worker) serveCompletions(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(rw, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if w.down.Load() {
		http.Error(rw, `{"error":{"message":"engine restarting"}}`, http.StatusServiceUnavailable)
		return
	}
	var req chatRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil || json.Unmarshal(body, &req) != nil {
		http.Error(rw, `{"error":{"message":"the body is not a JSON request"}}`, http.StatusBadRequest)
		return
	}
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	var prompt strings.Builder
	for _, m := range req.Messages {
		prompt.WriteString(m.Role + "\n" + m.Content + "\n")
	}
	prompt.WriteString(req.Prompt)
	chars := utf8.RuneCountInString(prompt.String())
	promptTokens := chars/4 + 1
	cached := w.http.remember(prompt.String()) / 4
	n := defaultTokens
	if req.MaxTokens != nil && *req.MaxTokens > 0 {
		n = min(*req.MaxTokens, maxTokens)
	}
	finish := "stop"
	if req.MaxTokens != nil && *req.MaxTokens <= maxTokens {
		finish = "length"
	}
	model := req.Model
	if model == "" {
		model = w.cfg.Model
	}
	id := "cmpl-" + w.cfg.Name + "-" + fmt.Sprint(w.http.streams.Load())
	first := FirstToken + time.Duration(promptTokens)*20*time.Microsecond + time.Duration(w.http.firstDelay.Load())
	usage := map[string]any{"prompt_tokens": promptTokens, "completion_tokens": n, "total_tokens": promptTokens + n,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached}}
	wait := func(d time.Duration) bool {
		select {
		case <-time.After(d):
			return true
		case <-r.Context().Done():
			return false
		}
	}

	if !req.Stream {
		if !wait(first + time.Duration(n-1)*ITL) {
			return
		}
		text := strings.TrimSpace(strings.Repeat("tok ", n))
		choice := map[string]any{"index": 0, "finish_reason": finish}
		object := "text_completion"
		if chat {
			object, choice["message"] = "chat.completion", map[string]any{"role": "assistant", "content": text}
		} else {
			choice["text"] = text
		}
		rw.Header().Set("Content-Type", "application/json")
		json.NewEncoder(rw).Encode(map[string]any{"id": id, "object": object, "model": model, "choices": []any{choice}, "usage": usage})
		return
	}

	k := w.http.streams.Add(1)
	cut := false
	if every := w.http.cutEvery.Load(); every > 0 && k%every == 0 {
		cut = true
	}
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	fl := http.NewResponseController(rw)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(rw, "data: %s\n\n", b); err != nil {
			return false
		}
		return fl.Flush() == nil
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{"index": 0, "finish_reason": finish}
		object := "text_completion"
		if chat {
			object, c["delta"] = "chat.completion.chunk", delta
		} else {
			c["text"] = delta["content"]
		}
		return map[string]any{"id": id, "object": object, "model": model, "choices": []any{c}}
	}
	if chat && !send(chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	if !wait(first) {
		return
	}
	for i := 0; i < n; i++ {
		if i > 0 && !wait(ITL) {
			return
		}
		if !send(chunk(map[string]any{"content": "tok "}, nil)) {
			return
		}
	}
	if cut {
		return // the connection ends cleanly: no finish_reason, no [DONE]
	}
	if !send(chunk(map[string]any{}, finish)) {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send(map[string]any{"id": id, "object": "chat.completion.chunk", "model": model, "choices": []any{}, "usage": usage})
	}
	io.WriteString(rw, "data: [DONE]\n\n")
}

// remember returns how many of the prompt's leading characters are in
// whole blocks it saw before, and remembers its blocks.
func (c *completions) remember(prompt string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil || len(c.seen) > maxRemembered {
		c.seen = map[uint64]bool{}
	}
	h := fnv.New64a()
	hit, matching := 0, true
	runes := []rune(prompt)
	for i := 0; i+cacheBlock <= len(runes); i += cacheBlock {
		h.Write([]byte(string(runes[i : i+cacheBlock])))
		k := h.Sum64()
		if matching && c.seen[k] {
			hit += cacheBlock
		} else {
			matching = false
		}
		c.seen[k] = true
	}
	return hit
}
