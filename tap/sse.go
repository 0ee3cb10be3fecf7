package tap

import (
	"bytes"
	"encoding/json"
)

// maxEventBytes bounds one SSE event's data held for inspection: a larger
// event is forwarded like any other bytes but not read (counted as
// oversize). OpenAI-style chunks are a few hundred bytes.
const maxEventBytes = 1 << 20

// sseScanner reads an SSE stream as it arrives, in pieces of any size, and
// hands each complete event's data to onEvent. It holds at most one line
// and one event (maxEventBytes each): memory per stream is bounded whatever
// the upstream sends.
type sseScanner struct {
	line     []byte // the current line so far
	data     []byte // the current event's data lines, joined by \n
	hasData  bool
	oversize bool // the current line or event outgrew maxEventBytes: skipped
	skipped  int  // events skipped for size
	onEvent  func(data []byte)
}

// write feeds the next bytes of the stream.
func (s *sseScanner) write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.addLine(p)
			return
		}
		s.addLine(p[:i])
		s.endLine()
		p = p[i+1:]
	}
}

func (s *sseScanner) addLine(p []byte) {
	if s.oversize {
		return
	}
	if len(s.line)+len(p) > maxEventBytes {
		s.oversize, s.line = true, s.line[:0]
		return
	}
	s.line = append(s.line, p...)
}

// endLine handles one complete line (the \n removed; a \r before it too).
func (s *sseScanner) endLine() {
	l := bytes.TrimSuffix(s.line, []byte{'\r'})
	s.line = s.line[:0]
	switch {
	case len(l) == 0: // a blank line ends the event
		if s.oversize {
			s.skipped++
		} else if s.hasData {
			s.onEvent(s.data)
		}
		s.data, s.hasData, s.oversize = s.data[:0], false, false
	case s.oversize:
	case bytes.HasPrefix(l, []byte("data:")):
		v := bytes.TrimPrefix(l[5:], []byte{' '})
		if len(s.data)+len(v)+1 > maxEventBytes {
			s.oversize = true
			return
		}
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, v...)
		s.hasData = true
	}
	// Comments (":…"), event:, id: and retry: lines carry no content.
}

// finish is the end of the stream: an event not closed by a blank line is
// not dispatched (the SSE rule), and says the stream was cut mid-event.
func (s *sseScanner) finish() (partial bool) {
	return s.hasData || len(s.line) > 0
}

// chunk is the part of a completion chunk (or a whole response, or a
// Responses API event) tap reads. Content is held as raw JSON only to tell
// whether it is empty: it is never kept or written anywhere.
type chunk struct {
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage"`
	Nvext   *struct {
		WorkerID *struct {
			Prefill *uint64 `json:"prefill_worker_id"`
			Decode  *uint64 `json:"decode_worker_id"`
		} `json:"worker_id"`
	} `json:"nvext"`
	Error json.RawMessage `json:"error"`

	// The Responses API's stream events.
	Type     string          `json:"type"`
	Delta    json.RawMessage `json:"delta"`
	Response *struct {
		Status            string `json:"status"`
		Usage             *usage `json:"usage"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
	} `json:"response"`
}

type chunkChoice struct {
	Delta *struct {
		Content          json.RawMessage `json:"content"`
		ReasoningContent json.RawMessage `json:"reasoning_content"`
		Reasoning        json.RawMessage `json:"reasoning"`
		ToolCalls        json.RawMessage `json:"tool_calls"`
	} `json:"delta"`
	Message *struct {
		Content   json.RawMessage `json:"content"`
		ToolCalls json.RawMessage `json:"tool_calls"`
	} `json:"message"`
	Text         json.RawMessage `json:"text"`
	FinishReason *string         `json:"finish_reason"`
}

// usage is OpenAI's usage block (chat and completions) or the Responses
// API's (input/output tokens).
type usage struct {
	PromptTokens        *int `json:"prompt_tokens"`
	CompletionTokens    *int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokens        *int `json:"input_tokens"`
	OutputTokens       *int `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// nonEmpty: a JSON value that carries something (not null, "", [] or {}).
func nonEmpty(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "", "null", `""`, "[]", "{}":
		return false
	}
	return true
}

// hasContent: the chunk carries generated output (text, reasoning or a
// tool call): the client's first token.
func (c *chunk) hasContent() bool {
	for i := range c.Choices {
		ch := &c.Choices[i]
		if d := ch.Delta; d != nil && (nonEmpty(d.Content) || nonEmpty(d.ReasoningContent) || nonEmpty(d.Reasoning) || nonEmpty(d.ToolCalls)) {
			return true
		}
		if m := ch.Message; m != nil && (nonEmpty(m.Content) || nonEmpty(m.ToolCalls)) {
			return true
		}
		if nonEmpty(ch.Text) {
			return true
		}
	}
	switch c.Type {
	case "response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta", "response.refusal.delta":
		return nonEmpty(c.Delta)
	}
	return false
}

// finish is the finish reason the chunk carries ("" none).
func (c *chunk) finish() string {
	for i := range c.Choices {
		if f := c.Choices[i].FinishReason; f != nil && *f != "" {
			return *f
		}
	}
	if r := c.Response; r != nil {
		switch c.Type {
		case "response.completed":
			return orString(r.Status, "completed")
		case "response.incomplete":
			if r.IncompleteDetails != nil && r.IncompleteDetails.Reason != "" {
				return r.IncompleteDetails.Reason
			}
			return "incomplete"
		}
	}
	return ""
}

func (c *chunk) usage() *usage {
	if c.Usage != nil {
		return c.Usage
	}
	if c.Response != nil {
		return c.Response.Usage
	}
	return nil
}

func orString(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
