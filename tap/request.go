package tap

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// requestMeta is what tap keeps of a request body: no text, only its
// model, whether it streams, the prompt's length and its fingerprint.
type requestMeta struct {
	model  string
	stream bool
	chars  *int
	fp     []string
}

// reqBody is the part of a request body tap reads. Text fields stay raw
// JSON until they are measured and hashed; nothing of them is kept.
type reqBody struct {
	Model        string          `json:"model"`
	Stream       *bool           `json:"stream"`
	Messages     []reqMessage    `json:"messages"`     // chat
	Prompt       json.RawMessage `json:"prompt"`       // completions
	Instructions json.RawMessage `json:"instructions"` // responses
	Input        json.RawMessage `json:"input"`        // responses
}

type reqMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type reqPart struct {
	Type string          `json:"type"`
	Text json.RawMessage `json:"text"`
}

// errNotJSON is a request body that is not a JSON object: forwarded as
// is, not inspected.
var errNotJSON = errors.New("request body is not a JSON object")

// parseRequest reads a chat, completions or responses request body.
func parseRequest(body []byte, endpoint string, key []byte) (requestMeta, error) {
	var b reqBody
	if len(bytes.TrimSpace(body)) == 0 || json.Unmarshal(body, &b) != nil {
		return requestMeta{}, errNotJSON
	}
	m := requestMeta{model: b.Model, stream: b.Stream != nil && *b.Stream}
	fp := newFingerprinter(key, b.Model)
	n, known := 0, false
	text := func(s string) {
		n += utf8.RuneCountInString(s)
		known = true
		fp.write(s)
	}
	switch endpoint {
	case "/v1/chat/completions":
		for _, msg := range b.Messages {
			fp.write(msg.Role)
			fp.write("\n")
			contentText(msg.Content, text)
			fp.write("\n")
		}
	case "/v1/completions":
		promptText(b.Prompt, text)
	case "/v1/responses":
		if s, ok := jsonString(b.Instructions); ok {
			text(s)
			fp.write("\n")
		}
		if s, ok := jsonString(b.Input); ok {
			text(s)
		} else {
			var items []reqMessage
			if json.Unmarshal(b.Input, &items) == nil {
				for _, it := range items {
					fp.write(it.Role)
					fp.write("\n")
					contentText(it.Content, text)
					fp.write("\n")
				}
			}
		}
	}
	if known {
		m.chars = intp(n)
	}
	m.fp = fp.sum()
	return m, nil
}

// contentText feeds a message's content: a string, or the text of its
// parts (images and other parts have no characters).
func contentText(raw json.RawMessage, text func(string)) {
	if s, ok := jsonString(raw); ok {
		text(s)
		return
	}
	var parts []reqPart
	if json.Unmarshal(raw, &parts) != nil {
		return
	}
	for _, p := range parts {
		if s, ok := jsonString(p.Text); ok {
			text(s)
		}
	}
}

// promptText feeds a completions prompt: a string or a list of strings.
// A prompt of token ids has no characters (usage gives its tokens).
func promptText(raw json.RawMessage, text func(string)) {
	if s, ok := jsonString(raw); ok {
		text(s)
		return
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return
	}
	for _, e := range list { // a batch of prompts: their characters add up
		if s, ok := jsonString(e); ok {
			text(s)
		}
	}
}

func jsonString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}
