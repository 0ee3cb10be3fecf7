package dynamo

import (
	"encoding/json"
	"strings"
	"testing"
)

// Records as Dynamo's discovery writes them (serde's JSON of
// DiscoveryInstance, lib/runtime/src/discovery/mod.rs), the current shape
// and v1.2's, and the ways one can be wrong.
func TestChannel(t *testing.T) {
	for _, tc := range []struct {
		json    string
		verdict Verdict
		ep      string
		id      uint64
		why     string
	}{
		{`{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dynamo","component":"backend","name":"generate"}},"topic":"kv-events","instance_id":7587888751432,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.5:41234"}}}`,
			Read, "tcp://10.0.0.5:41234", 7587888751432, ""},
		{`{"type":"EventChannel","namespace":"dynamo","component":"backend","topic":"kv-events","instance_id":42,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://[fd00::5]:41234"}}}`,
			Read, "tcp://[fd00::5]:41234", 42, ""},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":9007199254740991,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://worker-0.dynamo:5557"}}}`,
			Read, "tcp://worker-0.dynamo:5557", 1<<53 - 1, ""},
		{`{"type":"EventChannel","topic":"kv_metrics","instance_id":1,"transport":{"kind":"Nats","config":{"subject_prefix":"namespace.dynamo"}}}`, Other, "", 0, ""},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":1,"transport":{"kind":"Nats","config":{"subject_prefix":"namespace.dynamo.component.backend"}}}`,
			Elsewhere, "", 0, `kv-events on NATS (subject prefix "namespace.dynamo.component.backend")`},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":1,"transport":{"kind":"ZmqBroker","config":{"xsub_endpoints":["tcp://b:5555"],"xpub_endpoints":["tcp://b:5556"]}}}`,
			Elsewhere, "", 0, "through a ZMQ broker (xpub [tcp://b:5556])"},
		{`{"type":"Endpoint","topic":"kv-events"}`, Bad, "", 0, `type "Endpoint", want EventChannel`},
		{`[1,2]`, Bad, "", 0, "a list, not a DiscoveryInstance"},
		{`{"type":"EventChannel","topic":"kv-events","transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.5:1"}}}`, Bad, "", 0, "instance_id is missing"},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":-3,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.5:1"}}}`, Bad, "", 0, "instance_id -3 is not a publisher id"},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":"7","transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.5:1"}}}`, Bad, "", 0, "instance_id 7 is not a publisher id"},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":1,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://0.0.0.0:5557"}}}`, Bad, "", 0, "is a wildcard address"},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":1,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://[::]:5557"}}}`, Bad, "", 0, "is a wildcard address"},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":1,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://*:5557"}}}`, Bad, "", 0, "is a wildcard address"},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":1,"transport":{"kind":"Zmq","config":{"endpoint":"ipc:///tmp/x"}}}`, Bad, "", 0, "is not tcp://host:port"},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":1,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.5:70000"}}}`, Bad, "", 0, "has no port from 1 to 65535"},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":1,"transport":{"kind":"Zmq","config":{}}}`, Bad, "", 0, `endpoint "" is not tcp://host:port`},
		{`{"type":"EventChannel","topic":"kv-events","instance_id":1,"transport":{"Zmq":"tcp://10.0.0.5:1"}}`, Bad, "", 0, `transport kind "" is not Zmq, Nats or ZmqBroker`},
	} {
		dec := json.NewDecoder(strings.NewReader(tc.json))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		c, verdict, why := Channel(v, "kv-events")
		if verdict != tc.verdict || c.Endpoint != tc.ep || c.PublisherID != tc.id || !strings.Contains(why, tc.why) {
			t.Errorf("%s:\n got %v %+v %q\nwant %v %s %d %q", tc.json, verdict, c, why, tc.verdict, tc.ep, tc.id, tc.why)
		}
	}
}

// Each problem is said once while it lasts, counted when bad; said again
// when it changes, or goes and comes back.
func TestReporter(t *testing.T) {
	var r Reporter
	r.Say("a", "invalid", "a is bad", true)
	r.Say("b", "config", "b is elsewhere", false)
	if got := r.Done(); len(got) != 2 || got[0].Msg != "a is bad; not read (1 bad advertisement(s) so far)" || got[1].Msg != "b is elsewhere" {
		t.Fatalf("first pass: %+v", got)
	}
	r.Say("a", "invalid", "a is bad", true)
	r.Say("b", "config", "b is elsewhere", false)
	if got := r.Done(); len(got) != 0 {
		t.Fatalf("said again: %+v", got)
	}
	r.Say("b", "config", "b is elsewhere", false) // a fixed
	r.Done()
	r.Say("a", "invalid", "a is bad", true) // and broken again
	r.Say("b", "invalid", "b is worse", true)
	if got := r.Done(); len(got) != 2 || !strings.Contains(got[0].Msg, "(2 bad") || !strings.Contains(got[1].Msg, "b is worse; not read (3 bad") {
		t.Fatalf("changes: %+v", got)
	}
}
