package serve

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	secretfile "github.com/kvtop/kvtop/internal/secret"
)

// maxTokenBytes bounds a token file: a token is a line, not a document.
const maxTokenBytes = 4096

// ReadTokenFile reads a bearer token: the file's content without
// surrounding whitespace. An empty or oversized file is an error (an empty
// token would let anyone in). The errors never quote the content.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("auth token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("auth token file %s: %w", path, err)
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("auth token file %s: longer than %d bytes: a token is one line", path, maxTokenBytes)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", fmt.Errorf("auth token file %s is empty", path)
	case strings.ContainsAny(tok, "\r\n"):
		return "", fmt.Errorf("auth token file %s: more than one line: a token is one line", path)
	case strings.IndexFunc(tok, func(r rune) bool { return r < 0x21 || r == 0x7f }) >= 0:
		return "", errors.New("auth token file " + path + ": the token has spaces or control characters")
	}
	return tok, nil
}

// TokenFileWarning says when a token file can be read by group or others
// (any of the mode bits 0o077), as ssh does for keys: one line to print at
// start, "" when the mode is fine or the file cannot be looked at. It is
// the rule of the metrics collector's bearer_token_file check.
func TokenFileWarning(path string) string { return secretfile.FileWarning("auth token file", path) }
