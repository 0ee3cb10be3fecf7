package natsevents

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvtop/kvtop/collectors/internal/streamhealth"
	"github.com/kvtop/kvtop/internal/secret"
	"github.com/kvtop/kvtop/internal/tlsca"
)

// DefaultSubject is where Dynamo's event plane publishes KV events over
// NATS (EventPublisher::for_component(component, "kv-events")), for every
// namespace and component.
const DefaultSubject = "namespace.*.component.*.kv-events"

// DefaultTopic is the first frame of Dynamo's ZMQ event plane messages in
// direct mode (lib/runtime/src/transports/event_plane/zmq_transport.rs).
const DefaultTopic = "kv-events"

// Options configure the collector. Zero durations and counts take the
// defaults.
type Options struct {
	// URL is the NATS server (several, comma-separated, for a cluster).
	URL string
	// ZMQ, instead of URL, reads Dynamo's ZMQ event plane (its default
	// since mid-2026): the PUB endpoints its workers bind
	// ("tcp://10.0.0.5:40123"), each subscribed to Topic (default
	// "kv-events").
	ZMQ   []string
	Topic string
	// Discover, with or without ZMQ, follows the endpoints Dynamo's
	// publishers advertise (discover.go): read while advertised, and a
	// message must carry the publisher id advertised for its endpoint.
	Discover Discovery
	// Window is how long the pool shows a worker that left (its
	// publishers withdrawn) before forgetting it (default 60s): one
	// publishing again within it is told joined again.
	Window time.Duration
	// Subject is subscribed to with core NATS when JetStream is nil
	// (default DefaultSubject). With JetStream it narrows the stream's
	// subjects ("" = all of them).
	Subject   string
	JetStream *JetStream
	// Resolve maps a Dynamo worker id to a kvtop worker name; nil (or ""
	// from it) names it "worker_<id>", as Dynamo's router logs do.
	Resolve func(workerID uint64) string

	// Authentication, as Dynamo's NATS_AUTH_* variables offer it; secrets
	// come from files or environment variables, never from the config.
	User, PasswordEnv   string
	TokenFile, TokenEnv string
	CredsFile           string
	CAFile              string
	InsecureSkipVerify  bool

	// MaxMessageBytes: a bigger message is counted and not decoded
	// (default 8 MiB; NATS' own max_payload is 1 MiB unless raised).
	MaxMessageBytes int
	// Pending bounds what nats.go queues for kvtop's core subscription
	// before dropping (a slow consumer): messages and bytes.
	PendingMessages, PendingBytes int

	ReplayTimeout time.Duration // a JetStream replay without progress this long gives up (default 5s)
	MaxReplays    int           // concurrent replays (default 4)
	HoldBack      int           // live events held behind one replay (default 10000)
	StatusEvery   time.Duration // min interval between StreamStatus sends per publisher (default 250ms)
	Incidents     int           // incidents kept per publisher (default 50)
	MaxPublishers int           // (worker, rank) streams tracked at once (default 4096)
	IdleEvict     time.Duration // a publisher silent this long is forgotten (default 10m)
}

// JetStream reads the KV events from a JetStream stream: Dynamo's durable
// KV events (NatsQueue, the router's --durable-kv-events). The live events
// come through a consumer of the stream, and a gap in a worker's event
// ids is replayed from the stream.
type JetStream struct {
	// Stream is the stream name, e.g. namespace-dynamo-component-backend-kv-events.
	Stream string
	// Consumer names a durable consumer kvtop creates (or resumes) on the
	// stream; "" uses an ordered ephemeral consumer, gone when kvtop is.
	Consumer string
	// Start is where a new consumer begins: "all" (default: the whole
	// stream, which Dynamo keeps for an hour and purges after its
	// snapshots), "new" (live only), or a duration ("10m": that long ago).
	Start string
}

// start returns the parsed Start.
func (j *JetStream) start() (all, fresh bool, ago time.Duration, err error) {
	switch s := strings.TrimSpace(j.Start); s {
	case "", "all":
		return true, false, 0, nil
	case "new":
		return false, true, 0, nil
	default:
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return false, false, 0, fmt.Errorf("jetstream start %q is not all, new or a positive duration", j.Start)
		}
		return false, false, d, nil
	}
}

func (o *Options) defaults() {
	if o.Subject == "" && o.JetStream == nil && len(o.ZMQ) == 0 && o.Discover == nil {
		o.Subject = DefaultSubject
	}
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.Topic == "" {
		o.Topic = DefaultTopic
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 8 << 20
	}
	if o.PendingMessages <= 0 {
		o.PendingMessages = 65536
	}
	if o.PendingBytes <= 0 {
		o.PendingBytes = 64 << 20
	}
	if o.ReplayTimeout <= 0 {
		o.ReplayTimeout = 5 * time.Second
	}
	streamhealth.Bounds{MaxReplays: &o.MaxReplays, HoldBack: &o.HoldBack, Incidents: &o.Incidents,
		MaxPublishers: &o.MaxPublishers, StatusEvery: &o.StatusEvery, IdleEvict: &o.IdleEvict}.Defaults()
}

// check validates the options (before anything connects).
func (o *Options) check() error {
	if len(o.ZMQ) > 0 || o.Discover != nil {
		if o.URL != "" || o.JetStream != nil {
			return errors.New("natsevents: the ZMQ event plane and NATS are two sources: configure one")
		}
		for _, ep := range o.ZMQ {
			if !strings.HasPrefix(ep, "tcp://") && !strings.HasPrefix(ep, "ipc://") {
				return fmt.Errorf("natsevents: %q is not a tcp:// (or ipc://) ZMQ endpoint", ep)
			}
		}
		return nil
	}
	if strings.TrimSpace(o.URL) == "" {
		return errors.New("natsevents: no NATS URL")
	}
	for _, u := range strings.Split(o.URL, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Host == "" || (p.Scheme != "nats" && p.Scheme != "tls" && p.Scheme != "ws" && p.Scheme != "wss") {
			return fmt.Errorf("natsevents: %q is not a nats:// (or tls://) URL", shownURL(u))
		}
	}
	if o.JetStream != nil {
		if o.JetStream.Stream == "" {
			return errors.New("natsevents: jetstream needs a stream name")
		}
		if _, _, _, err := o.JetStream.start(); err != nil {
			return fmt.Errorf("natsevents: %w", err)
		}
	}
	if o.Subject != "" && strings.ContainsAny(o.Subject, " \t") {
		return fmt.Errorf("natsevents: subject %q has blanks", o.Subject)
	}
	n := 0
	for _, s := range []string{o.TokenFile, o.TokenEnv, o.CredsFile} {
		if s != "" {
			n++
		}
	}
	if o.User != "" {
		n++
	}
	if n > 1 {
		return errors.New("natsevents: choose one of user/password_env, token_file, token_env, creds_file")
	}
	return nil
}

// natsOptions turns the auth and TLS settings into nats.go options.
// Secrets are read here, at connect, and never go into a message.
func (o *Options) natsOptions() ([]nats.Option, error) {
	var out []nats.Option
	switch {
	case o.User != "":
		pw := ""
		if o.PasswordEnv != "" {
			pw = os.Getenv(o.PasswordEnv)
			if pw == "" {
				return nil, fmt.Errorf("natsevents: password_env %s is not set", o.PasswordEnv)
			}
		}
		out = append(out, nats.UserInfo(o.User, pw))
	case o.TokenFile != "":
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("natsevents: token_file %s: %v", o.TokenFile, unwrapPath(err))
		}
		out = append(out, nats.Token(strings.TrimSpace(string(b))))
	case o.TokenEnv != "":
		t := strings.TrimSpace(os.Getenv(o.TokenEnv))
		if t == "" {
			return nil, fmt.Errorf("natsevents: token_env %s is not set", o.TokenEnv)
		}
		out = append(out, nats.Token(t))
	case o.CredsFile != "":
		out = append(out, nats.UserCredentials(o.CredsFile))
	}
	if o.CAFile != "" || o.InsecureSkipVerify {
		conf := &tls.Config{InsecureSkipVerify: o.InsecureSkipVerify} //nolint:gosec // the operator asked for it
		if o.CAFile != "" {
			pool, err := tlsca.Roots(o.CAFile, false)
			if errors.Is(err, tlsca.ErrNoPEM) {
				return nil, fmt.Errorf("natsevents: ca_file %w", err)
			}
			if err != nil {
				return nil, fmt.Errorf("natsevents: ca_file: %v", unwrapPath(err))
			}
			conf.RootCAs = pool
		}
		out = append(out, nats.Secure(conf))
	}
	return out, nil
}

// Warnings are the start-time notes about secret files others can read.
func (o *Options) Warnings() []string {
	var out []string
	for _, f := range []struct{ what, path string }{{"nats token_file", o.TokenFile}, {"nats creds_file", o.CredsFile}} {
		if w := secret.FileWarning(f.what, f.path); w != "" {
			out = append(out, w)
		}
	}
	return out
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// shownURL drops credentials from a NATS URL (nats://user:pass@host).
func shownURL(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.Host == "" {
		return "an unparsable URL"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

func shownURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = shownURL(p)
	}
	return strings.Join(parts, ",")
}

// workerName is the default name of a Dynamo worker id.
func workerName(id uint64) string { return "worker_" + strconv.FormatUint(id, 10) }
