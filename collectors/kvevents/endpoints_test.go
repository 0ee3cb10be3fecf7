package kvevents

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseReplayReply(t *testing.T) {
	seq := func(v uint64) []byte { return ReplayRequest(v)[1] }
	ff := seq(EndSeq)
	payload := batchOf(1, removedMap(h1))
	tests := []struct {
		name    string
		frames  [][]byte
		want    ReplayReply
		wantErr string
	}{
		{"vLLM >= 0.26", [][]byte{{}, []byte("kv-events"), seq(7), payload},
			ReplayReply{Topic: "kv-events", Seq: 7, Payload: payload}, ""},
		{"vLLM >= 0.26 end marker", [][]byte{{}, {}, ff, {}}, ReplayReply{Seq: EndSeq, Payload: []byte{}, End: true}, ""},
		{"legacy / SGLang", [][]byte{{}, seq(9), payload}, ReplayReply{Seq: 9, Payload: payload}, ""},
		{"legacy end marker", [][]byte{{}, ff, {}}, ReplayReply{Seq: EndSeq, Payload: []byte{}, End: true}, ""},
		{"no delimiter (REQ socket)", [][]byte{[]byte("t"), seq(1), payload}, ReplayReply{}, "3 frames"},
		{"short seq", [][]byte{{}, []byte{1, 2}, payload}, ReplayReply{}, "2 bytes, want 8"},
		{"too many frames", [][]byte{{}, {}, {}, {}, {}}, ReplayReply{}, "5 frames"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseReplayReply(tt.frames)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := ReplayRequest(0x0102); len(got) != 2 || len(got[0]) != 0 || string(got[1]) != "\x00\x00\x00\x00\x00\x00\x01\x02" {
		t.Errorf("ReplayRequest(0x0102) = %q, want [\"\", 8-byte big-endian]", got)
	}
}

func TestRankEndpoints(t *testing.T) {
	tests := []struct {
		events, replay string
		ranks          int
		wantEv, wantRp []string
		wantErr        string
	}{
		{"tcp://10.0.0.5:5557", "tcp://10.0.0.5:5558", 1,
			[]string{"tcp://10.0.0.5:5557"}, []string{"tcp://10.0.0.5:5558"}, ""},
		{"tcp://10.0.0.5:5557", "tcp://10.0.0.5:6557", 3,
			[]string{"tcp://10.0.0.5:5557", "tcp://10.0.0.5:5558", "tcp://10.0.0.5:5559"},
			[]string{"tcp://10.0.0.5:6557", "tcp://10.0.0.5:6558", "tcp://10.0.0.5:6559"}, ""},
		{"tcp://worker-0.pool:5557", "", 2,
			[]string{"tcp://worker-0.pool:5557", "tcp://worker-0.pool:5558"}, []string{"", ""}, ""},
		{"tcp://[fd00::5]:5557", "", 2, []string{"tcp://[fd00::5]:5557", "tcp://[fd00::5]:5558"}, []string{"", ""}, ""},
		{"inproc://cache", "", 2, []string{"inproc://cache", "inproc://cache_dp1"}, []string{"", ""}, ""},
		{"ipc:///tmp/kv", "", 1, []string{"ipc:///tmp/kv"}, []string{""}, ""},
		{"tcp://h:5557", "", 0, []string{"tcp://h:5557"}, []string{""}, ""},
		{"ipc:///tmp/kv", "", 2, nil, nil, "only tcp:// and inproc://"},
		{"tcp://h:65535", "", 2, nil, nil, "beyond 65535"},
		{"tcp://h:5557", "tcp://h", 2, nil, nil, "replay"},
		{"tcp://h:5557", "", -1, nil, nil, "dp_ranks is -1"},
	}
	for _, tt := range tests {
		ev, rp, err := RankEndpoints(tt.events, tt.replay, tt.ranks)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("RankEndpoints(%q, %q, %d) error %v, want %q", tt.events, tt.replay, tt.ranks, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(ev, tt.wantEv) || !reflect.DeepEqual(rp, tt.wantRp) {
			t.Errorf("RankEndpoints(%q, %q, %d) = %q, %q, %v; want %q, %q", tt.events, tt.replay, tt.ranks, ev, rp, err, tt.wantEv, tt.wantRp)
		}
	}
}

func TestWorkerEndpoints(t *testing.T) {
	got, err := WorkerEndpoints("w1", "tcp://10.0.0.6:5557", "tcp://10.0.0.6:5600", "kv", 2)
	want := []Endpoint{
		{Worker: "w1", Rank: 0, Events: "tcp://10.0.0.6:5557", Replay: "tcp://10.0.0.6:5600", Topic: "kv"},
		{Worker: "w1", Rank: 1, Events: "tcp://10.0.0.6:5558", Replay: "tcp://10.0.0.6:5601", Topic: "kv"},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v; want %+v", got, err, want)
	}
	if _, err := WorkerEndpoints("w2", "ipc:///x", "", "", 2); err == nil || !strings.HasPrefix(err.Error(), "worker w2: events:") {
		t.Errorf("error %v, want one naming worker w2 and its events endpoint", err)
	}
}

func TestNewRejectsBadEndpoints(t *testing.T) {
	tests := []struct {
		name    string
		o       Options
		wantErr string
	}{
		{"nothing configured", Options{}, "no event endpoints"},
		{"bind address as connect target", Options{Endpoints: []Endpoint{{Worker: "w0", Events: "tcp://*:5557"}}},
			"w0 events rank 0: \"tcp://*:5557\" is a bind address"},
		{"no port", Options{Endpoints: []Endpoint{{Worker: "w0", Events: "tcp://10.0.0.5"}}}, "missing port"},
		{"not an endpoint", Options{Endpoints: []Endpoint{{Worker: "w0", Events: "10.0.0.5:5557"}}}, "not a ZMQ endpoint"},
		{"bad transport", Options{Endpoints: []Endpoint{{Worker: "w0", Events: "http://10.0.0.5:5557"}}}, "unsupported transport"},
		{"bad replay", Options{Endpoints: []Endpoint{{Worker: "w0", Events: "tcp://h:1", Replay: "tcp://h:x"}}}, "replay"},
		{"duplicate", Options{Endpoints: []Endpoint{{Worker: "w0", Events: "tcp://h:1"}, {Worker: "w0", Events: "tcp://h:2"}}},
			"configured twice"},
		{"no worker", Options{Endpoints: []Endpoint{{Events: "tcp://h:1"}}}, "no worker name"},
		{"bad bind", Options{Bind: "tcp://127.0.0.1"}, "events_bind"},
	}
	for _, tt := range tests {
		_, err := New(tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.wantErr)
		}
	}
	for _, ok := range []Options{
		{Bind: "tcp://*:5557"},
		{Bind: "tcp://0.0.0.0:5557"},
		{Endpoints: []Endpoint{{Worker: "w0", Events: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558"}}},
		{Endpoints: []Endpoint{{Worker: "w0", Events: "ipc:///run/kv.sock"}}},
	} {
		if _, err := New(ok); err != nil {
			t.Errorf("New(%+v): %v", ok, err)
		}
	}
}

func TestTopicID(t *testing.T) {
	for topic, want := range map[string]string{
		"kv@127.0.0.1:8001@sim-org/sim-model-1b": "127.0.0.1:8001",
		"kv@10.0.0.7@Qwen/Qwen3-8B":              "10.0.0.7",
		"kv-events":                              "kv-events",
		"":                                       "(no topic)",
		"kv@":                                    "kv@",
	} {
		if got := TopicID(topic); got != want {
			t.Errorf("TopicID(%q) = %q, want %q", topic, got, want)
		}
	}
}
