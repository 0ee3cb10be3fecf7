package decisions

import (
	"bytes"
	"errors"
	"regexp"
	"strconv"

	"github.com/kvtop/kvtop/collectors"
)

// The vLLM production-stack router (Python) logs each decision at INFO as
//
//	[ts] INFO: Routing request {id} with session id {sid} to {url} at {unix}, process time = {s} (request.py:…)
//
// or, in older releases and without session routing,
//
//	[ts] INFO: Routing request {id} to {url} at {unix}, process time = {s} (…)
//
// The unix time after "at" is the decision time (the bracketed one has no
// zone). A session id means the session router chose by session affinity;
// otherwise the choice used no cache prediction at all. The session id
// itself is not kept. Other lines (the DEBUG "Routing request {id} for
// model: …", uvicorn access lines) are skipped.

var prodStackRe = regexp.MustCompile(`Routing request (\S+)(?: with session id (.*?))? to (\S+) at (\S+), process time = `)

func parseProductionStack(line []byte) (Result, error) {
	line = stripANSI(line)
	if !bytes.Contains(line, []byte("Routing request ")) {
		return otherText(line)
	}
	m := prodStackRe.FindSubmatch(line)
	if m == nil {
		return skip(SkipNotDecision), nil
	}
	at, err := strconv.ParseFloat(string(m[4]), 64)
	if err != nil || !finite(at) || at <= 0 {
		return Result{}, errors.New("production-stack: the time after \"at\" is not unix seconds")
	}
	pred := &collectors.Prediction{Source: "none", Input: "none"}
	if sid := string(m[2]); sid != "" && sid != "None" {
		pred = &collectors.Prediction{Source: "session", Input: "session_id"}
	}
	return Result{Decision: &collectors.Decision{
		TS:         unixFloat(at),
		RequestID:  string(m[1]),
		Chosen:     string(m[3]),
		Prediction: pred,
		Format:     FormatProductionStack,
	}}, nil
}
