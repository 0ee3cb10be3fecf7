package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// clientLoad sends streaming chat requests to a kvtop tap (which forwards
// them to the router's HTTP face), as the clients of a pool would, and reads
// every byte. Prompts share a few long system prompts, so the workers'
// caches hit; each request is made unique by its user question.
type clientLoad struct {
	target string
	client *http.Client
	logf   func(string, ...any)

	mu   sync.Mutex
	rate float64
	stop chan struct{}
	n    atomic.Int64

	sent, failed atomic.Int64
}

func newClientLoad(target string, logf func(string, ...any)) *clientLoad {
	return &clientLoad{target: target, logf: logf, client: &http.Client{Timeout: 2 * time.Minute}}
}

// setRate starts, changes or (0) stops the requests.
func (c *clientLoad) setRate(rate float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		close(c.stop)
		c.stop = nil
	}
	c.rate = rate
	if rate <= 0 || math.IsNaN(rate) {
		return
	}
	stop := make(chan struct{})
	c.stop = stop
	go c.run(rate, stop)
}

func (c *clientLoad) close() { c.setRate(0) }

func (c *clientLoad) run(rate float64, stop chan struct{}) {
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		go func() {
			if err := c.one(); err != nil && c.failed.Add(1) == 1 {
				c.logf("sim: clients: %s: %v (is kvtop, with its tap, running?)", c.target, err)
			}
		}()
	}
}

// systemPrompts are the shared beginnings of the clients' conversations.
var systemPrompts = []string{
	"You are the support assistant of a company that sells industrial pumps. Answer in two sentences, cite the manual's section, never invent part numbers. ",
	"You are a careful code reviewer. Point out bugs first, then style; quote the line you mean; keep every comment under forty words and never rewrite the code. ",
	"You summarize legal contracts for engineers: parties, obligations, deadlines and penalties, as a bulleted list, each bullet under twenty words, no advice. ",
}

func (c *clientLoad) one() error {
	k := c.n.Add(1)
	sys := systemPrompts[k%int64(len(systemPrompts))]
	body, _ := json.Marshal(map[string]any{
		"model": Model, "stream": true, "max_tokens": 8 + k%24, "stream_options": map[string]any{"include_usage": true},
		"messages": []map[string]string{{"role": "system", "content": sys + sys}, {"role": "user", "content": fmt.Sprintf("Question %d, about item %d.", k, k%97)}},
	})
	req, err := http.NewRequest(http.MethodPost, c.target+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sim-client-token") // forwarded by the tap, never recorded
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	c.sent.Add(1)
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
