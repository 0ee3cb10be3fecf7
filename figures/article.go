package figures

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// A puts "a" or "an" before phrase, as it is read aloud: "an ITL
// histogram", "a TTFT histogram", "an e2e histogram", "an integer", "a
// uint64". An acronym (its first two letters capitals) is read letter by
// letter; a word by its first letter, with the common exceptions of words
// in "u" read "you" (unit, uint64, user, UTF-8 aside) and "one".
func A(phrase string) string {
	return article(phrase) + " " + phrase
}

func article(phrase string) string {
	r, n := utf8.DecodeRuneInString(phrase)
	if n == 0 {
		return "a"
	}
	next, _ := utf8.DecodeRuneInString(phrase[n:])
	if unicode.IsUpper(r) && (unicode.IsUpper(next) || unicode.IsDigit(next) || next == utf8.RuneError || unicode.IsSpace(next)) {
		// Letter names that begin with a vowel sound: A, E, F, H, I, L,
		// M, N, O, R, S, X.
		if strings.ContainsRune("AEFHILMNORSX", r) {
			return "an"
		}
		return "a"
	}
	w := strings.ToLower(phrase)
	switch {
	case strings.HasPrefix(w, "one"), strings.HasPrefix(w, "uni"), strings.HasPrefix(w, "use"),
		strings.HasPrefix(w, "usu"), strings.HasPrefix(w, "uint"), strings.HasPrefix(w, "utf"):
		return "a"
	case strings.ContainsRune("aeiou", rune(w[0])):
		return "an"
	}
	return "a"
}
