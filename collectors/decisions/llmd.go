package decisions

import (
	"strings"

	"github.com/kvtop/kvtop/collectors"
)

// The llm-d router / Gateway API Inference Extension EPP logs zap JSON. Its
// decision line (--v=3) is
//
//	{"level":"Level(-2)","ts":…,"msg":"Request handled","x-request-id":…,
//	 "objectiveKey":…,"incomingModelName":…,"targetModel":…,"endpoint":"10.0.0.5:8000"}
//
// where endpoint is "ip:port" of the primary target (then fallbacks,
// comma-separated). Older EPPs logged "model", "targetModel" and the target
// pod as an object ({"NamespacedName":{…},"Address":…}). The log says
// nothing about the prefix-cache prediction, so Prediction stays nil.
// Other lines (including --v=4 "Calculated score" per plugin) are skipped.

var (
	llmdRequestKeys  = []string{"x-request-id", "requestID", "requestId", "request_id", "x_request_id"}
	llmdEndpointKeys = []string{"endpoint", "targetPod", "targetEndpoint", "pod"}
	llmdModelKeys    = []string{"targetModel", "targetModelName", "resolvedTargetModel", "model"}
)

func parseLLMD(obj map[string]any) (Result, error) {
	if str(obj["msg"]) != "Request handled" {
		return skip(SkipNotDecision), nil
	}
	reqID := firstKey(obj, llmdRequestKeys)
	if reqID == "" {
		return skip(SkipNoRequestID), nil
	}
	var chosen string
	for _, k := range llmdEndpointKeys {
		if chosen = endpointName(obj[k]); chosen != "" {
			break
		}
	}
	ts, _ := parseLogTime(str(obj["ts"])) // ISO8601 text or unix seconds
	return Result{Decision: &collectors.Decision{
		TS:        ts,
		RequestID: reqID,
		Model:     firstKey(obj, llmdModelKeys),
		Chosen:    chosen,
		Format:    FormatLLMD,
	}}, nil
}

func firstKey(obj map[string]any, keys []string) string {
	for _, k := range keys {
		if v := str(obj[k]); v != "" {
			return v
		}
	}
	return ""
}

// endpointName reads a target: "ip:port[,fallback…]" gives the primary
// "ip:port"; a pod object gives its address (with port if logged), else
// "namespace/name".
func endpointName(v any) string {
	switch x := v.(type) {
	case string:
		primary, _, _ := strings.Cut(x, ",")
		return strings.TrimSpace(primary)
	case map[string]any:
		addr := firstKey(x, []string{"Address", "address", "IPAddress", "ipAddress"})
		if addr != "" {
			if port := firstKey(x, []string{"Port", "port"}); port != "" {
				return addr + ":" + port
			}
			return addr
		}
		nn, _ := x["NamespacedName"].(map[string]any)
		if nn == nil {
			nn = x
		}
		name := firstKey(nn, []string{"Name", "name"})
		if ns := firstKey(nn, []string{"Namespace", "namespace"}); ns != "" && name != "" {
			return ns + "/" + name
		}
		return name
	}
	return ""
}
