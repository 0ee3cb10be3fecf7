package kvevents

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// RankEndpoints expands a worker's events and replay endpoints into one per
// data-parallel rank, the way vLLM and SGLang place them: rank r listens at
// base port + r (inproc endpoints get the suffix "_dp<r>"). ranks 0 means 1.
// An empty replay stays empty for every rank.
func RankEndpoints(events, replay string, ranks int) ([]string, []string, error) {
	if ranks < 0 {
		return nil, nil, fmt.Errorf("dp_ranks is %d, want 1 or more", ranks)
	}
	ranks = max(ranks, 1)
	evs := make([]string, ranks)
	rps := make([]string, ranks)
	for r := 0; r < ranks; r++ {
		var err error
		if evs[r], err = rankEndpoint(events, r); err != nil {
			return nil, nil, fmt.Errorf("events: %w", err)
		}
		if replay == "" {
			continue
		}
		if rps[r], err = rankEndpoint(replay, r); err != nil {
			return nil, nil, fmt.Errorf("replay: %w", err)
		}
	}
	return evs, rps, nil
}

// rankEndpoint offsets ep for rank r.
func rankEndpoint(ep string, r int) (string, error) {
	if r == 0 {
		return ep, nil
	}
	scheme, addr, ok := strings.Cut(ep, "://")
	switch {
	case ok && scheme == "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", fmt.Errorf("%q: %v", ep, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p <= 0 {
			return "", fmt.Errorf("%q: port %q is not a number", ep, port)
		}
		if p+r > 65535 {
			return "", fmt.Errorf("%q: port %d + rank %d is beyond 65535", ep, p, r)
		}
		return "tcp://" + net.JoinHostPort(host, strconv.Itoa(p+r)), nil
	case ok && scheme == "inproc":
		return fmt.Sprintf("%s_dp%d", ep, r), nil
	}
	return "", fmt.Errorf("%q: only tcp:// and inproc:// endpoints can be offset per DP rank", ep)
}

// checkEndpoint validates a ZMQ endpoint kvtop connects to (bind false) or
// binds (bind true), with a message an operator can act on.
func checkEndpoint(ep string, bind bool) error {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok || addr == "" {
		return fmt.Errorf("%q is not a ZMQ endpoint (want tcp://host:port)", ep)
	}
	switch scheme {
	case "ipc", "inproc":
		return nil
	case "tcp":
	default:
		return fmt.Errorf("%q: unsupported transport %q (want tcp, ipc or inproc)", ep, scheme)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %v (want tcp://host:port)", ep, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		if !(bind && port == "*") {
			return fmt.Errorf("%q: port %q is not a number from 1 to 65535", ep, port)
		}
	}
	if host == "" {
		return fmt.Errorf("%q: no host", ep)
	}
	if !bind && (host == "*" || host == "0.0.0.0" || host == "::") {
		return fmt.Errorf("%q is a bind address: kvtop connects to the worker, give its host", ep)
	}
	return nil
}

// TopicID returns the publisher id of an llm-d style topic
// "kv@<id>@<model>" (the pod ip:port), else the whole topic.
func TopicID(topic string) string {
	if rest, ok := strings.CutPrefix(topic, "kv@"); ok {
		id, _, _ := strings.Cut(rest, "@")
		if id != "" {
			return id
		}
	}
	if topic == "" {
		return "(no topic)"
	}
	return topic
}

// WorkerEndpoints expands one configured worker (events, replay, topic,
// dp_ranks) into its per-rank Endpoints, for Options.Endpoints.
func WorkerEndpoints(worker, events, replay, topic string, dpRanks int) ([]Endpoint, error) {
	evs, rps, err := RankEndpoints(events, replay, dpRanks)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", worker, err)
	}
	out := make([]Endpoint, len(evs))
	for r := range evs {
		out[r] = Endpoint{Worker: worker, Rank: r, Events: evs[r], Replay: rps[r], Topic: topic}
	}
	return out, nil
}
