package openai

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// scanner is a single-pass JSON reader (RFC 8259) over a request body. The
// typed parsers drive it field by field: what kvgate uses is decoded in place,
// what it forwards untouched is validated and skipped without allocating, and
// only the few parts a chat template prints are kept as Value trees.
type scanner struct {
	buf   []byte
	pos   int
	depth int
	lim   Limits
	kept  int // Values built so far, bounded by lim.MaxKeptValues
	// arena holds the decoded strings that had escapes, one after another:
	// made once, at the first such string, with room for the rest of the
	// body, which bounds every later string since an escape never decodes
	// to more bytes than it takes (\uXXXX: six for at most three). One
	// allocation per request instead of one per message, and a string is
	// decoded in one pass without regrowing its buffer.
	arena []byte
}

// bytesToString returns b as a string without copying. Strings decoded
// without escapes share the request body's memory, which is why a parsed
// request requires its body to stay unmodified (see ParseChat): copying every
// string doubled the parse time of a 220 KB body.
func bytesToString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func newScanner(buf []byte, lim Limits) *scanner {
	return &scanner{buf: buf, lim: lim}
}

func (s *scanner) syntax(format string, args ...any) *Error {
	return s.syntaxAt(s.pos, format, args...)
}

// syntaxAt reports a syntax error at byte offset pos of the input.
func (s *scanner) syntaxAt(pos int, format string, args ...any) *Error {
	e := invalid("", format, args...)
	e.Message = "invalid JSON at byte " + strconv.Itoa(pos) + ": " + e.Message
	return e
}

// badUTF8 reports the first invalid UTF-8 byte of raw, which starts at
// offset start.
func (s *scanner) badUTF8(start int, raw []byte) *Error {
	i := 0
	for i < len(raw) {
		r, size := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		i += size
	}
	return s.syntaxAt(start+i, "invalid UTF-8 in string")
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.buf) {
		switch s.buf[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end of input.
func (s *scanner) peek() byte {
	s.skipSpace()
	if s.pos >= len(s.buf) {
		return 0
	}
	return s.buf[s.pos]
}

// peekKind reports the kind of the next value without consuming it.
func (s *scanner) peekKind() (Kind, *Error) {
	switch c := s.peek(); {
	case c == '{':
		return KindObject, nil
	case c == '[':
		return KindArray, nil
	case c == '"':
		return KindString, nil
	case c == 't' || c == 'f':
		return KindBool, nil
	case c == 'n':
		return KindNull, nil
	case c == '-' || (c >= '0' && c <= '9') || c == 'N' || c == 'I':
		// NaN, Infinity and -Infinity too: Python's json.loads, which the
		// engines parse bodies with, accepts them (Lib/json/scanner.py).
		return KindNumber, nil
	case c == 0:
		return 0, s.syntax("unexpected end of input")
	default:
		return 0, s.syntax("unexpected character %q", c)
	}
}

func (s *scanner) end() *Error {
	s.skipSpace()
	if s.pos != len(s.buf) {
		return s.syntax("unexpected data after the top-level value")
	}
	return nil
}

func (s *scanner) enter() *Error {
	s.depth++
	if s.depth > s.lim.MaxDepth {
		return s.syntax("nesting deeper than %d", s.lim.MaxDepth)
	}
	return nil
}

// object reads an object, calling member for each key with the scanner
// positioned at the value, which member must consume.
func (s *scanner) object(member func(key string) *Error) *Error {
	if s.peek() != '{' {
		return s.syntax("expected an object")
	}
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++
	if s.peek() == '}' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.syntax("expected a string key")
		}
		key, err := s.readString()
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return s.syntax("expected ':' after key")
		}
		s.pos++
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			s.depth--
			return nil
		default:
			return s.syntax("expected ',' or '}' in object")
		}
	}
}

// array reads an array, calling item for each element with the scanner
// positioned at it, which item must consume.
func (s *scanner) array(item func(i int) *Error) *Error {
	if s.peek() != '[' {
		return s.syntax("expected an array")
	}
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++
	if s.peek() == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for i := 0; ; i++ {
		if err := item(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			return nil
		default:
			return s.syntax("expected ',' or ']' in array")
		}
	}
}

func (s *scanner) literal(word string) *Error {
	if len(s.buf)-s.pos < len(word) || string(s.buf[s.pos:s.pos+len(word)]) != word {
		return s.syntax("invalid literal")
	}
	s.pos += len(word)
	return nil
}

func (s *scanner) readBool() (bool, *Error) {
	switch s.peek() {
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	}
	return false, s.syntax("expected a boolean")
}

// readNumber consumes a number and returns its literal text.
func (s *scanner) readNumber() (string, *Error) {
	s.skipSpace()
	start := s.pos
	b := s.buf
	for _, word := range [...]string{"NaN", "Infinity", "-Infinity"} {
		if len(b)-s.pos >= len(word) && string(b[s.pos:s.pos+len(word)]) == word {
			s.pos += len(word)
			return word, nil
		}
	}
	if s.pos < len(b) && b[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(b) && b[s.pos] == '0':
		s.pos++
	case s.pos < len(b) && b[s.pos] >= '1' && b[s.pos] <= '9':
		for s.pos < len(b) && b[s.pos] >= '0' && b[s.pos] <= '9' {
			s.pos++
		}
	default:
		return "", s.syntax("invalid number")
	}
	if s.pos < len(b) && b[s.pos] == '.' {
		s.pos++
		if s.pos >= len(b) || b[s.pos] < '0' || b[s.pos] > '9' {
			return "", s.syntax("invalid number")
		}
		for s.pos < len(b) && b[s.pos] >= '0' && b[s.pos] <= '9' {
			s.pos++
		}
	}
	if s.pos < len(b) && (b[s.pos] == 'e' || b[s.pos] == 'E') {
		s.pos++
		if s.pos < len(b) && (b[s.pos] == '+' || b[s.pos] == '-') {
			s.pos++
		}
		if s.pos >= len(b) || b[s.pos] < '0' || b[s.pos] > '9' {
			return "", s.syntax("invalid number")
		}
		for s.pos < len(b) && b[s.pos] >= '0' && b[s.pos] <= '9' {
			s.pos++
		}
	}
	if s.pos-start > 64 {
		return "", s.syntax("number literal longer than 64 bytes")
	}
	return string(b[start:s.pos]), nil
}

// readString consumes a string and returns its decoded contents. Invalid
// UTF-8 and unpaired surrogate escapes are rejected: Python would accept a
// lone surrogate but the engine's tokenizer cannot encode it, so the request
// could never be served as sent.
func (s *scanner) readString() (string, *Error) {
	if s.peek() != '"' {
		return "", s.syntax("expected a string")
	}
	s.pos++
	start := s.pos
	b := s.buf
	// Fast path: no escapes, ASCII or valid UTF-8.
	n, ascii := plainRun(b[start:])
	s.pos = start + n
	if s.pos < len(b) {
		switch c := b[s.pos]; {
		case c == '"':
			raw := b[start:s.pos]
			if len(raw) > s.lim.MaxStringBytes {
				return "", tooLarge("", "string longer than %d bytes", s.lim.MaxStringBytes)
			}
			if !ascii && !utf8.Valid(raw) {
				return "", s.badUTF8(start, raw)
			}
			s.pos++
			return bytesToString(raw), nil
		case c < 0x20:
			return "", s.syntax("control character in string")
		}
	}
	if s.pos >= len(b) {
		return "", s.syntax("unterminated string")
	}
	// Slow path: escapes present; decoded into the arena.
	if room := len(b) - start; cap(s.arena)-len(s.arena) < room {
		s.arena = make([]byte, 0, room)
	}
	out := s.arena[len(s.arena):len(s.arena)]
	out = append(out, b[start:s.pos]...)
	for {
		if s.pos >= len(b) {
			return "", s.syntax("unterminated string")
		}
		c := b[s.pos]
		switch {
		case c == '"':
			if !ascii && !utf8.Valid(out) {
				// Escapes only add valid UTF-8, so the fault is in the raw bytes.
				return "", s.badUTF8(start, b[start:s.pos])
			}
			s.pos++
			// out lies in the arena (the room check above bounds it), and
			// the arena is only ever appended to past it.
			s.arena = s.arena[:len(s.arena)+min(len(out), cap(s.arena)-len(s.arena))]
			return bytesToString(out), nil
		case c < 0x20:
			return "", s.syntax("control character in string")
		case c == '\\':
			if s.pos+1 >= len(b) {
				return "", s.syntax("unterminated string")
			}
			escStart := s.pos
			e := b[s.pos+1]
			s.pos += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, err := s.hex4()
				if err != nil {
					return "", err
				}
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 || s.pos+1 >= len(b) || b[s.pos] != '\\' || b[s.pos+1] != 'u' {
						return "", s.syntaxAt(escStart, "unpaired surrogate escape")
					}
					s.pos += 2
					r2, err := s.hex4()
					if err != nil {
						return "", err
					}
					r = utf16.DecodeRune(r, r2)
					if r == utf8.RuneError {
						return "", s.syntaxAt(escStart, "unpaired surrogate escape")
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", s.syntaxAt(escStart, "invalid escape '\\%c'", e)
			}
			// The plain run after an escape, in the same step: a prompt's
			// text has an escaped newline every ~20 bytes (issue 27 item 3).
			n, runASCII := plainRun(b[s.pos:])
			ascii = ascii && runASCII
			out = append(out, b[s.pos:s.pos+n]...)
			s.pos += n
		default:
			// A run of plain bytes up to the next escape or the closing
			// quote, copied at once.
			n, runASCII := plainRun(b[s.pos:])
			ascii = ascii && runASCII
			out = append(out, b[s.pos:s.pos+n]...)
			s.pos += n
		}
		if len(out) > s.lim.MaxStringBytes {
			return "", tooLarge("", "string longer than %d bytes", s.lim.MaxStringBytes)
		}
	}
}

func (s *scanner) hex4() (rune, *Error) {
	if len(s.buf)-s.pos < 4 {
		return 0, s.syntax("short \\u escape")
	}
	var r rune
	for _, c := range s.buf[s.pos : s.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, s.syntax("invalid \\u escape")
		}
	}
	s.pos += 4
	return r, nil
}

// skip validates and consumes one value without keeping it.
func (s *scanner) skip() *Error {
	k, err := s.peekKind()
	if err != nil {
		return err
	}
	switch k {
	case KindObject:
		return s.object(func(string) *Error { return s.skip() })
	case KindArray:
		return s.array(func(int) *Error { return s.skip() })
	case KindString:
		return s.skipString()
	case KindBool:
		_, err := s.readBool()
		return err
	case KindNull:
		return s.literal("null")
	default:
		_, err := s.readNumber()
		return err
	}
}

// skipString validates a string without building it.
func (s *scanner) skipString() *Error {
	start := s.pos
	s.pos++ // opening quote, checked by peekKind
	b := s.buf
	for s.pos < len(b) {
		c := b[s.pos]
		switch {
		case c == '"':
			s.pos++
			return nil
		case c == '\\':
			// Escapes are rare in skipped fields; decode to validate them.
			s.pos = start
			_, err := s.readString()
			return err
		case c < 0x20:
			return s.syntax("control character in string")
		case c < 0x80:
			s.pos++
		default:
			r, size := utf8.DecodeRune(b[s.pos:])
			if r == utf8.RuneError && size <= 1 {
				return s.syntax("invalid UTF-8 in string")
			}
			s.pos += size
		}
	}
	return s.syntax("unterminated string")
}

// value reads one value and keeps it as a tree.
func (s *scanner) value() (Value, *Error) {
	s.kept++
	if s.kept > s.lim.MaxKeptValues {
		return Value{}, tooLarge("", "more than %d JSON values in kept fields", s.lim.MaxKeptValues)
	}
	k, err := s.peekKind()
	if err != nil {
		return Value{}, err
	}
	switch k {
	case KindObject:
		v := Value{Kind: KindObject}
		var seen map[string]int
		err := s.object(func(key string) *Error {
			mv, err := s.value()
			if err != nil {
				return err
			}
			if i := memberIndex(v.Members, seen, key); i >= 0 {
				v.Members[i].Value = mv
				return nil
			}
			v.Members = append(v.Members, Member{Key: key, Value: mv})
			if len(v.Members) == 16 {
				seen = make(map[string]int, 32)
				for i, m := range v.Members {
					seen[m.Key] = i
				}
			} else if seen != nil {
				seen[key] = len(v.Members) - 1
			}
			return nil
		})
		return v, err
	case KindArray:
		v := Value{Kind: KindArray, Items: []Value{}}
		err := s.array(func(int) *Error {
			it, err := s.value()
			if err != nil {
				return err
			}
			v.Items = append(v.Items, it)
			return nil
		})
		return v, err
	case KindString:
		str, err := s.readString()
		return Value{Kind: KindString, Text: str}, err
	case KindBool:
		b, err := s.readBool()
		return Value{Kind: KindBool, Bool: b}, err
	case KindNull:
		return Value{}, s.literal("null")
	default:
		lit, err := s.readNumber()
		return Value{Kind: KindNumber, Text: lit}, err
	}
}

// memberIndex finds key among members, using seen once the object is large
// enough that a linear scan per member would be quadratic.
func memberIndex(members []Member, seen map[string]int, key string) int {
	if seen != nil {
		if i, ok := seen[key]; ok {
			return i
		}
		return -1
	}
	for i := range members {
		if members[i].Key == key {
			return i
		}
	}
	return -1
}

// ParseValue decodes one JSON document into an ordered Value, under lim.
func ParseValue(data []byte, lim Limits) (Value, error) {
	lim = lim.withDefaults()
	if len(data) > lim.MaxBodyBytes {
		return Value{}, tooLarge("", "JSON document of %d bytes exceeds the %d-byte limit", len(data), lim.MaxBodyBytes)
	}
	s := newScanner(data, lim)
	v, err := s.value()
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return Value{}, err
	}
	return v, nil
}
