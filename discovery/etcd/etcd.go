// Package etcd follows the ZMQ event plane publishers Dynamo's workers
// register in etcd, Dynamo's default discovery off Kubernetes
// (DYN_DISCOVERY_BACKEND unset; docs/PROTOCOLS.md §10.5): each
// publisher's EventChannel is the key
//
//	v1/event_channels/namespace/<ns>/component/<c>/endpoint/<e>/topic/kv-events/<publisher id, hex>
//
// holding its DiscoveryInstance as JSON, put under the worker's lease
// (lib/runtime/src/discovery/kv_store.rs, storage/kv/etcd.rs): it goes
// when the worker unregisters it or its lease expires (the worker died).
//
// kvtop reads it through etcd's own JSON gateway to the v3 API (POST
// /v3/kv/range, then a /v3/watch stream from the next revision; served by
// every etcd 3.4+ on its client URLs), not a client library: two calls,
// no dependency. A watch that ends or is compacted lists again. With
// user, it authenticates (/v3/auth/authenticate) and sends the token.
package etcd

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvtop/kvtop/collectors"
	"github.com/kvtop/kvtop/collectors/natsevents"
	"github.com/kvtop/kvtop/discovery/dynamo"
	"github.com/kvtop/kvtop/internal/tlsca"
)

// Prefix is where Dynamo keeps its event channels.
const Prefix = "v1/event_channels/"

// Options configure the discovery.
type Options struct {
	// Endpoints are etcd's client URLs, http(s)://host:2379 (Dynamo's
	// ETCD_ENDPOINTS); a failing one is left for the next.
	Endpoints []string
	// Topic is the channels' topic (default natsevents.DefaultTopic).
	Topic string
	// User and the variable holding its password (ETCD_AUTH_USERNAME,
	// ETCD_AUTH_PASSWORD), when etcd has auth on.
	User, PasswordEnv string
	// CAFile is the CA of an https etcd (ETCD_AUTH_CA).
	CAFile             string
	InsecureSkipVerify bool
	// Debounce is the least time between two sets (default 100ms).
	Debounce time.Duration
	// Timeout bounds each request but the watch (default 5s).
	Timeout time.Duration
}

// Source follows the publishers registered in etcd (a
// natsevents.Discovery).
type Source struct {
	o    Options
	http *http.Client // no timeout: the watch is long; requests have their own
}

var _ natsevents.Discovery = (*Source)(nil)

// New checks the options and reads the CA; it does not contact etcd.
func New(o Options) (*Source, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints")
	}
	for _, ep := range o.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("etcd: %q is not an http(s)://host:port URL", ep)
		}
	}
	if o.Topic == "" {
		o.Topic = natsevents.DefaultTopic
	}
	if o.Debounce <= 0 {
		o.Debounce = 100 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: o.InsecureSkipVerify} //nolint:gosec // the operator's choice, said in the config
	if o.CAFile != "" {
		roots, err := tlsca.Roots(o.CAFile, false)
		if err != nil {
			return nil, tlsca.Setting("etcd ca_file", err)
		}
		tr.TLSClientConfig.RootCAs = roots
	}
	return &Source{o: o, http: &http.Client{Transport: tr}}, nil
}

// Name implements natsevents.Discovery.
func (s *Source) Name() string { return "etcd" }

// Watch implements natsevents.Discovery: it lists, sends the set, watches
// from the next revision and sends the set again on each change; when the
// watch ends (etcd restarted, the revision compacted, the network) it
// lists again, on the next endpoint after a failure. Trouble is said
// (rate-limited), never fatal.
func (s *Source) Watch(ctx context.Context, sets chan<- natsevents.Channels, errs chan<- collectors.Observation) error {
	w := &watch{s: s, ctx: ctx, sets: sets, errs: errs, owners: map[string]int{}}
	wait := 500 * time.Millisecond
	for i := 0; ctx.Err() == nil; i++ {
		ep := s.o.Endpoints[i%len(s.o.Endpoints)]
		listed, err := w.session(ep)
		if ctx.Err() != nil {
			return nil
		}
		if listed {
			wait = 500 * time.Millisecond
		}
		if err != nil && time.Since(w.saidAt) >= 5*time.Second {
			w.saidAt = time.Now()
			w.say(said(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
	return nil
}

// said is a session's error as a SourceError's kind and message.
func said(err error) dynamo.Said {
	kind := "refused"
	var st *statusError
	switch {
	case errors.As(err, &st) && (st.code == http.StatusUnauthorized || st.code == http.StatusForbidden):
		kind = "http_status"
	case errors.Is(err, context.DeadlineExceeded):
		kind = "timeout"
	}
	return dynamo.Said{Kind: kind, Msg: err.Error() + " (retrying)"}
}

type watch struct {
	s      *Source
	ctx    context.Context
	sets   chan<- natsevents.Channels
	errs   chan<- collectors.Observation
	token  string
	said   dynamo.Reporter
	saidAt time.Time
	owners map[string]int // owners of the last set, with their channel count
}

// rec is one key's value and lease.
type rec struct {
	value []byte
	lease string
}

// session lists, then watches until the watch ends; listed says it got
// that far.
func (w *watch) session(ep string) (listed bool, err error) {
	base := strings.TrimRight(ep, "/")
	if w.s.o.User != "" {
		if err := w.auth(base); err != nil {
			return false, err
		}
	}
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
		Kvs []gwKV `json:"kvs"`
	}
	if err := w.post(base+"/v3/kv/range", map[string]any{"key": b64(Prefix), "range_end": b64(prefixEnd(Prefix))}, &rng); err != nil {
		return false, err
	}
	rev, err := strconv.ParseInt(rng.Header.Revision, 10, 64)
	if err != nil {
		return false, fmt.Errorf("etcd %s: range: revision %q", base, rng.Header.Revision)
	}
	state := map[string]rec{}
	for _, kv := range rng.Kvs {
		state[string(kv.Key)] = rec{value: kv.Value, lease: kv.Lease}
	}
	if !w.send(state) {
		return true, nil
	}
	return true, w.follow(base, rev+1, state)
}

// gwKV is a key-value of the gateway's JSON: bytes in base64, int64s as
// strings.
type gwKV struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
	Lease string `json:"lease"`
}

// follow watches from rev, applying events to state and sending the set,
// until the watch ends.
func (w *watch) follow(base string, rev int64, state map[string]rec) error {
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"create_request": map[string]any{
		"key": b64(Prefix), "range_end": b64(prefixEnd(Prefix)), "start_revision": strconv.FormatInt(rev, 10)}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v3/watch", bytes.NewReader(body))
	if err != nil {
		return err
	}
	w.header(req)
	resp, err := w.s.http.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: watch: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusErr(base, "watch", resp)
	}
	type result struct {
		Result struct {
			Canceled        bool   `json:"canceled"`
			CancelReason    string `json:"cancel_reason"`
			CompactRevision string `json:"compact_revision"`
			Events          []struct {
				Type string `json:"type"` // "" is PUT (the enum's zero), DELETE
				KV   gwKV   `json:"kv"`
			} `json:"events"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	results := make(chan result)
	ended := make(chan error, 1)
	go func() {
		dec := json.NewDecoder(resp.Body)
		for {
			var r result
			if err := dec.Decode(&r); err != nil {
				if err == io.EOF {
					err = fmt.Errorf("etcd %s: the watch ended", base)
				} else {
					err = fmt.Errorf("etcd %s: watch: %w", base, err)
				}
				ended <- err
				return
			}
			select {
			case results <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	var due <-chan time.Time // a set to send once the changes pause
	for {
		select {
		case <-w.ctx.Done():
			return nil
		case err := <-ended:
			return err
		case <-due:
			due = nil
			if !w.send(state) {
				return nil
			}
		case r := <-results:
			switch {
			case r.Error != nil:
				return fmt.Errorf("etcd %s: watch: %s", base, r.Error.Message)
			case r.Result.CompactRevision != "" && r.Result.CompactRevision != "0":
				return fmt.Errorf("etcd %s: watch from revision %d compacted (at %s): listing again", base, rev, r.Result.CompactRevision)
			case r.Result.Canceled:
				return fmt.Errorf("etcd %s: watch canceled: %s", base, r.Result.CancelReason)
			}
			for _, e := range r.Result.Events {
				if e.Type == "DELETE" {
					delete(state, string(e.KV.Key))
				} else {
					state[string(e.KV.Key)] = rec{value: e.KV.Value, lease: e.KV.Lease}
				}
			}
			if len(r.Result.Events) > 0 && due == nil {
				due = time.After(w.s.o.Debounce)
			}
		}
	}
}

// send builds the set from state and sends it; false when ctx is done.
func (w *watch) send(state map[string]rec) bool {
	keys := make([]string, 0, len(state))
	for k := range state {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	set := natsevents.Channels{At: time.Now(), Left: map[string]string{}}
	owners := map[string]int{}
	for _, k := range keys {
		r := state[k]
		owner := "etcd key " + k
		if l, err := strconv.ParseInt(r.lease, 10, 64); err == nil && l != 0 {
			owner = fmt.Sprintf("instance %x", l) // the worker's lease: its id in Dynamo's logs
		}
		dec := json.NewDecoder(bytes.NewReader(r.value))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			w.said.Say(k, "invalid", fmt.Sprintf("etcd %s: not JSON: %v", k, err), true)
			continue
		}
		c, verdict, why := dynamo.Channel(v, w.s.o.Topic)
		switch verdict {
		case dynamo.Read:
			c.Owner = owner
			set.Channels = append(set.Channels, c)
			owners[owner]++
		case dynamo.Elsewhere:
			w.said.Say(k, "config", fmt.Sprintf("etcd %s: %s", k, why), false)
		case dynamo.Bad:
			w.said.Say(k, "invalid", fmt.Sprintf("etcd %s: %s", k, why), true)
		}
	}
	for owner := range w.owners {
		if owners[owner] == 0 {
			set.Left[owner] = fmt.Sprintf("%s gone (its registration left etcd: it unregistered, or its lease expired)", owner)
		}
	}
	w.owners = owners
	for _, n := range w.said.Done() {
		w.say(n)
	}
	select {
	case w.sets <- set:
		return true
	case <-w.ctx.Done():
		return false
	}
}

func (w *watch) say(n dynamo.Said) {
	select {
	case w.errs <- &collectors.SourceError{Source: dynamo.Source, Kind: n.Kind, Message: n.Msg, At: time.Now()}:
	case <-w.ctx.Done():
	}
}

// auth gets a token for User (etcd's simple tokens expire: each session
// asks anew).
func (w *watch) auth(base string) error {
	pw := os.Getenv(w.s.o.PasswordEnv)
	if w.s.o.PasswordEnv != "" && pw == "" {
		return fmt.Errorf("etcd: password_env %s is not set", w.s.o.PasswordEnv)
	}
	w.token = ""
	var out struct {
		Token string `json:"token"`
	}
	if err := w.post(base+"/v3/auth/authenticate", map[string]string{"name": w.s.o.User, "password": pw}, &out); err != nil {
		return err
	}
	w.token = out.Token
	return nil
}

func (w *watch) header(req *http.Request) {
	req.Header.Set("Content-Type", "application/json")
	if w.token != "" {
		req.Header.Set("Authorization", w.token)
	}
}

// post is one request of the gateway, within Timeout.
func (w *watch) post(u string, in, out any) error {
	ctx, cancel := context.WithTimeout(w.ctx, w.s.o.Timeout)
	defer cancel()
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	w.header(req)
	what := u[strings.LastIndex(u, "/v3/")+4:]
	base := u[:strings.LastIndex(u, "/v3/")]
	resp, err := w.s.http.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %s: %w", base, what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusErr(base, what, resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(out); err != nil {
		return fmt.Errorf("etcd %s: %s: %w", base, what, err)
	}
	return nil
}

type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

func statusErr(base, what string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	var gw struct {
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &gw) == nil && (gw.Message != "" || gw.Error != "") {
		msg = gw.Message
		if msg == "" {
			msg = gw.Error
		}
	}
	return &statusError{code: resp.StatusCode, msg: fmt.Sprintf("etcd %s: %s: HTTP %d: %s", base, what, resp.StatusCode, msg)}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// prefixEnd is the range end of every key with prefix p.
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}
