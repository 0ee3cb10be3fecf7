// Package dynamo reads the records Dynamo's discovery keeps of its ZMQ
// event plane publishers, whatever the backend holds them (Kubernetes'
// DynamoWorkerMetadata, etcd's v1/event_channels; docs/PROTOCOLS.md
// §10.5): a DiscoveryInstance, serde's JSON of
//
//	{"type": "EventChannel", "scope": {"kind": …}, "topic": "kv-events",
//	 "instance_id": <publisher id>,
//	 "transport": {"kind": "Zmq", "config": {"endpoint": "tcp://10.0.0.5:41234"}}}
//
// (lib/runtime/src/discovery/mod.rs: internally tagged by "type"; the
// transport adjacently tagged by kind and config, its variants Zmq, Nats,
// ZmqBroker under their Rust names; v1.2 wrote namespace and component
// where scope is, which is not read). It also says what is wrong with
// them, once each.
package dynamo

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvtop/kvtop/collectors/natsevents"
)

// Verdict is what a record is to kvtop.
type Verdict int

const (
	Read      Verdict = iota // a publisher of the topic on ZMQ, direct: read
	Other                    // another topic, or not an event channel kvtop looks at
	Elsewhere                // the topic, on NATS or through a ZMQ broker: not read here
	Bad                      // unreadable: said and counted
)

// Channel reads one DiscoveryInstance decoded from JSON (objects as
// map[string]any; numbers as int64, float64 or json.Number). The string
// says why it is Elsewhere or Bad.
func Channel(v any, topic string) (natsevents.Channel, Verdict, string) {
	e, ok := v.(map[string]any)
	if !ok {
		return natsevents.Channel{}, Bad, fmt.Sprintf("a %s, not a DiscoveryInstance", JSONKind(v))
	}
	if t, _ := e["type"].(string); t != "EventChannel" {
		return natsevents.Channel{}, Bad, fmt.Sprintf("type %q, want EventChannel", t)
	}
	if t, _ := e["topic"].(string); t != topic {
		return natsevents.Channel{}, Other, "" // kv_metrics, …
	}
	tr, _ := e["transport"].(map[string]any)
	kind, _ := tr["kind"].(string)
	cfg, _ := tr["config"].(map[string]any)
	switch kind {
	case "Zmq":
	case "Nats":
		prefix, _ := cfg["subject_prefix"].(string)
		return natsevents.Channel{}, Elsewhere, fmt.Sprintf("%s on NATS (subject prefix %q): read them with event_plane.nats, not here", topic, prefix)
	case "ZmqBroker":
		return natsevents.Channel{}, Elsewhere, fmt.Sprintf("%s through a ZMQ broker (xpub %v): broker mode is not read", topic, cfg["xpub_endpoints"])
	default:
		return natsevents.Channel{}, Bad, fmt.Sprintf("transport kind %q is not Zmq, Nats or ZmqBroker", kind)
	}
	id, err := PublisherID(e["instance_id"])
	if err != nil {
		return natsevents.Channel{}, Bad, "instance_id " + err.Error()
	}
	ep, _ := cfg["endpoint"].(string)
	if err := Endpoint(ep); err != nil {
		return natsevents.Channel{}, Bad, fmt.Sprintf("endpoint %q %v", ep, err)
	}
	return natsevents.Channel{Endpoint: ep, PublisherID: id}, Read, ""
}

// PublisherID reads an instance_id: a JSON integer from 0 to 2^64-1
// (Dynamo's are below 2^53).
func PublisherID(v any) (uint64, error) {
	switch n := v.(type) {
	case int64:
		if n >= 0 {
			return uint64(n), nil
		}
	case float64:
		if n >= 0 && n <= 1<<53 && n == math.Trunc(n) {
			return uint64(n), nil
		}
	case json.Number:
		if id, err := strconv.ParseUint(string(n), 10, 64); err == nil {
			return id, nil
		}
	case nil:
		return 0, fmt.Errorf("is missing")
	}
	return 0, fmt.Errorf("%v is not a publisher id", v)
}

// Endpoint checks an advertised endpoint: tcp://host:port that kvtop can
// connect to (Dynamo advertises the host's address, never a wildcard).
func Endpoint(ep string) error {
	u, err := url.Parse(ep)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Path != "" || strings.ContainsAny(u.Host, " \t") {
		return fmt.Errorf("is not tcp://host:port")
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("has no port from 1 to 65535")
	}
	if h := u.Hostname(); h == "*" || net.ParseIP(h) != nil && net.ParseIP(h).IsUnspecified() {
		return fmt.Errorf("is a wildcard address, not one to connect to")
	}
	return nil
}

// JSONKind names a decoded JSON value's kind.
func JSONKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "list"
	case string:
		return "string"
	case bool:
		return "boolean"
	case int64, float64, json.Number:
		return "number"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// Said is one thing to tell the operator: a SourceError's kind and
// message.
type Said struct{ Kind, Msg string }

// Source is the SourceErrors' source.
const Source = "dynamo discovery"

// Reporter says what is wrong with the records, each once while it lasts
// (said again if it goes and comes back), and counts the bad ones. One
// pass over the records: Say for each, then Done.
type Reporter struct {
	told, now map[string]string
	bad       int
	out       []Said
}

// Say tells msg about the record key, unless it was told last pass. A
// bad record is counted.
func (r *Reporter) Say(key, kind, msg string, bad bool) {
	if r.now == nil {
		r.now = map[string]string{}
	}
	r.now[key] = msg
	if r.told[key] == msg {
		return
	}
	if bad {
		r.bad++
		msg = fmt.Sprintf("%s; not read (%d bad advertisement(s) so far)", msg, r.bad)
	}
	r.out = append(r.out, Said{kind, msg})
}

// Done ends the pass: what to say.
func (r *Reporter) Done() []Said {
	out := r.out
	r.told, r.now, r.out = r.now, nil, nil
	return out
}
