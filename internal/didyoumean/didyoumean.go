// Package didyoumean finds the known name closest to a misspelt one, for
// error messages that suggest a fix (kvgate's config keys, Envoy proto
// fields in validate-envoy).
package didyoumean

// MaxDistance is the largest edit distance still taken for a misspelling;
// beyond it a suggestion is more likely to mislead than help.
const MaxDistance = 2

// Closest returns the candidate nearest to name by Levenshtein distance,
// at most MaxDistance away, or "" when none is. Among equally near
// candidates the first in the given order wins, so callers that want a
// stable answer pass a stable order.
func Closest(name string, candidates []string) string {
	best, bestDist := "", MaxDistance+1
	for _, c := range candidates {
		if d := Distance(name, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
