package tap

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"unicode/utf8"
)

// The prefix fingerprint, after the approximate prefix scorer of the
// Gateway API Inference Extension (pkg/epp/scheduling/framework/plugins/
// multi/prefix, PROTOCOLS.md §13): the prompt's text is cut into chunks of
// FPChunkChars characters from its beginning, only whole chunks count, and
// each chunk's hash chains the one before it, seeded with the model. Two
// requests share their first k·FPChunkChars characters exactly when their
// k-th hashes match, so an operator sees which worker got which prefix
// without any text. The hash is keyed (HMAC-SHA-256, 64 bits shown): a
// guessed system prompt cannot be confirmed against a log without the key.
const (
	FPChunkChars = 64
	FPChunks     = 8
)

// NewFingerprintKey is a random key: fingerprints then compare within one
// tap process only (give the same key file to every tap, and across
// restarts, to compare them across).
func NewFingerprintKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}

// fingerprinter hashes the chunks of one prompt as its text is fed piece by
// piece (message by message): it holds one chunk's bytes, not the prompt.
type fingerprinter struct {
	mac   hash.Hash // keyed once, Reset per chunk
	prev  [sha256.Size]byte
	buf   []byte // the current chunk so far
	runes int    // characters in buf
	out   []string
}

func newFingerprinter(key []byte, model string) *fingerprinter {
	f := &fingerprinter{mac: hmac.New(sha256.New, key)}
	f.mac.Write([]byte(model))
	f.mac.Sum(f.prev[:0])
	return f
}

// write feeds text (UTF-8; invalid bytes count one character each).
func (f *fingerprinter) write(s string) {
	for len(s) > 0 && len(f.out) < FPChunks {
		// Take the characters that complete the chunk, in one append.
		n, i := FPChunkChars-f.runes, 0
		for ; n > 0 && i < len(s); n-- {
			if s[i] < utf8.RuneSelf {
				i++
			} else {
				_, w := utf8.DecodeRuneInString(s[i:])
				i += w
			}
		}
		f.buf = append(f.buf, s[:i]...)
		f.runes = FPChunkChars - n
		s = s[i:]
		if f.runes == FPChunkChars {
			f.mac.Reset()
			f.mac.Write(f.prev[:])
			f.mac.Write(f.buf)
			f.mac.Sum(f.prev[:0])
			f.out = append(f.out, hex.EncodeToString(f.prev[:8]))
			f.buf, f.runes = f.buf[:0], 0
		}
	}
}

// sum is the hashes of the whole chunks (nil when the prompt is shorter
// than one).
func (f *fingerprinter) sum() []string { return f.out }
