package domain

import "unicode/utf8"

// CutUTF8 returns at most the first n bytes of s, never cutting a UTF-8
// character in two: text cut for a reason, a log line or a preview stays
// valid UTF-8 when s was. Bytes that are not UTF-8 are cut at n.
func CutUTF8[T ~string | ~[]byte](s T, n int) T {
	if n < 0 {
		n = 0
	}
	if len(s) <= n {
		return s
	}
	for i := n; i > n-utf8.UTFMax && i >= 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n]
}
