package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// AddedToken is an entry of tokenizer.json's added_tokens: text matched as a
// whole before pre-tokenization and mapped to one id.
type AddedToken struct {
	ID         uint32
	Content    string
	Special    bool // skipped by decoders asked to skip special tokens
	Normalized bool // matched against the normalized text instead of the raw text
	LStrip     bool // swallows the whitespace on its left
	RStrip     bool // swallows the whitespace on its right
	SingleWord bool // matches only when not inside a word
}

// addedMatcher finds added tokens leftmost-longest, non-overlapping, like
// the Aho-Corasick automaton (MatchKind::LeftmostLongest) of tokenizers'
// added_vocabulary.rs, using a byte trie walked from each candidate start.
type addedMatcher struct {
	first [256]bool // bytes that start some token
	// only is the one byte every token starts with, or -1: Qwen3's added
	// tokens all start with '<' (<|im_start|>, <think>, <tool_call>), so
	// candidates are found with strings.IndexByte (vectorised) instead of
	// a table look-up per byte of a 30 KB prompt.
	only  int
	nodes []trieNode
	// edges holds every node's children, each node's as one run sorted by
	// byte: find scans a run (a handful of bytes) where a map[byte]int32
	// per node hashed every byte of every candidate (issue 27 item 3).
	edges []trieEdge
}

type trieNode struct {
	children map[byte]int32 // while building; nil once the edges are laid out
	// edgeStart, edgeEnd delimit the node's run in addedMatcher.edges.
	edgeStart, edgeEnd int32
	token              int32 // index into Tokenizer.added, -1 if no token ends here
}

type trieEdge struct {
	b     byte
	child int32
}

// child returns n's child on byte b.
func (m *addedMatcher) child(n int32, b byte) (int32, bool) {
	nd := &m.nodes[n]
	for _, e := range m.edges[nd.edgeStart:nd.edgeEnd] {
		if e.b == b {
			return e.child, true
		}
		if e.b > b {
			break
		}
	}
	return 0, false
}

// layOutEdges moves the build-time child maps into edges.
func (m *addedMatcher) layOutEdges() {
	for i := range m.nodes {
		nd := &m.nodes[i]
		nd.edgeStart = int32(len(m.edges))
		for b := range 256 {
			if c, ok := nd.children[byte(b)]; ok {
				m.edges = append(m.edges, trieEdge{b: byte(b), child: c})
			}
		}
		nd.edgeEnd = int32(len(m.edges))
		nd.children = nil
	}
}

func newAddedMatcher(tokens []AddedToken, include func(AddedToken) bool, content func(AddedToken) string) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{token: -1}}}
	empty := true
	for idx, t := range tokens {
		if !include(t) {
			continue
		}
		c := content(t)
		if c == "" {
			continue // tokenizers ignores empty added tokens
		}
		empty = false
		m.first[c[0]] = true
		n := int32(0)
		for i := 0; i < len(c); i++ {
			child, ok := m.nodes[n].children[c[i]]
			if !ok {
				if m.nodes[n].children == nil {
					m.nodes[n].children = make(map[byte]int32)
				}
				child = int32(len(m.nodes))
				m.nodes[n].children[c[i]] = child
				m.nodes = append(m.nodes, trieNode{token: -1})
			}
			n = child
		}
		if m.nodes[n].token < 0 { // the first of duplicate contents wins
			m.nodes[n].token = int32(idx)
		}
	}
	if empty {
		return nil
	}
	m.layOutEdges()
	m.only = -1
	for c := range m.first {
		if m.first[c] {
			if m.only != -1 {
				m.only = -1
				break
			}
			m.only = c
		}
	}
	return m
}

// find returns the leftmost-longest match starting at or after from.
func (m *addedMatcher) find(s string, from int) (start, end int, token int32, ok bool) {
	for i := from; i < len(s); i++ {
		if m.only >= 0 {
			k := strings.IndexByte(s[i:], byte(m.only))
			if k < 0 {
				break
			}
			i += k
		} else if !m.first[s[i]] {
			continue
		}
		n, best, bestEnd := int32(0), int32(-1), 0
		for j := i; j < len(s); j++ {
			child, found := m.child(n, s[j])
			if !found {
				break
			}
			n = child
			if t := m.nodes[n].token; t >= 0 {
				best, bestEnd = t, j+1
			}
		}
		if best >= 0 {
			return i, bestEnd, best, true
		}
	}
	return 0, 0, 0, false
}

// addedSplit is a piece of text: an added token (token >= 0) or plain text.
type addedSplit struct {
	start, end int
	token      int32
}

// split cuts s into plain pieces and added tokens following find_matches in
// added_vocabulary.rs: single_word tokens next to a word character are
// dropped (and scanning resumes after them), lstrip/rstrip widen the token's
// span over neighbouring whitespace, and a widened span may overlap the
// previous one exactly as it does there. It stops when yield returns false.
func (m *addedMatcher) split(s string, tokens []AddedToken, yield func(addedSplit) bool) {
	startOffset, from := 0, 0
	for {
		start, stop, tok, ok := m.find(s, from)
		if !ok {
			break
		}
		from = stop
		t := &tokens[tok]
		if t.SingleWord {
			startSpace := start == 0 || !endsWithWordChar(s[:start])
			stopSpace := stop == len(s) || !startsWithWordChar(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if t.LStrip {
			start = max(len(strings.TrimRightFunc(s[:start], isWhiteSpace)), startOffset)
		}
		if t.RStrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], isWhiteSpace))
		}
		if startOffset < start && !yield(addedSplit{startOffset, start, -1}) {
			return
		}
		if !yield(addedSplit{start, stop, tok}) {
			return
		}
		startOffset = stop
	}
	if startOffset < len(s) {
		yield(addedSplit{startOffset, len(s), -1})
	}
}

// isWordChar is the Rust regex crate's Unicode \w (UTS#18 Annex C):
// Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWordChar(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}
