package jinja

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// kvgate fork: Python's text forms of floats and JSON strings, so that
// prompts render byte for byte as transformers' jinja2 renders them (every
// byte feeds the token ids, and every token id the KV block hashes).

// pyFloatRepr is Python's repr(float) (also str(float) and what json.dumps
// writes): the shortest digits that round-trip, in positional notation for
// decimal exponents -4 ≤ e < 16 and with ".0" when integral, else in
// scientific notation with at least two exponent digits ("1e+16", "1.5e-05").
func pyFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expStr, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	e := strconv.Itoa(exp)
	if len(e) < 2 {
		e = "0" + e
	}
	return mant + "e" + sign + e
}

// appendPyJSONString writes s as json.dumps(s, ensure_ascii=False) does:
// only '"', '\\' and control characters below U+0020 are escaped (\n, \r,
// \t, \b, \f by name, others as \u00XX); U+2028, U+2029, DEL and '<', '>',
// '&' pass through unchanged. Invalid UTF-8 becomes U+FFFD, as Python's
// str cannot hold it.
func appendPyJSONString(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			sb.WriteByte(c)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				sb.WriteString(`\"`)
			case '\\':
				sb.WriteString(`\\`)
			case '\n':
				sb.WriteString(`\n`)
			case '\r':
				sb.WriteString(`\r`)
			case '\t':
				sb.WriteString(`\t`)
			case '\b':
				sb.WriteString(`\b`)
			case '\f':
				sb.WriteString(`\f`)
			default:
				const hex = "0123456789abcdef"
				sb.WriteString(`\u00`)
				sb.WriteByte(hex[c>>4])
				sb.WriteByte(hex[c&0xf])
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.WriteString(s[i : i+n])
		}
		i += n
	}
	sb.WriteByte('"')
}

// encodeValueJSONIndent is json.dumps(v, indent=n): each element on its own
// line, indented n spaces per level, item separator "," (Python's default
// when indent is given) unless separators say otherwise, keys in insertion
// order, empty containers as "[]" and "{}".
func encodeValueJSONIndent(sb *strings.Builder, v Value, indent, level int, itemSeparator, keySeparator string) error {
	newline := func(l int) {
		sb.WriteByte('\n')
		sb.WriteString(strings.Repeat(" ", indent*l))
	}
	switch v.kind {
	case KindList:
		items := v.AsList().Items
		if len(items) == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				sb.WriteString(itemSeparator)
			}
			newline(level + 1)
			if err := encodeValueJSONIndent(sb, item, indent, level+1, itemSeparator, keySeparator); err != nil {
				return err
			}
		}
		newline(level)
		sb.WriteByte(']')
		return nil
	case KindDict:
		d := v.AsDict()
		if len(d.Keys) == 0 {
			sb.WriteString("{}")
			return nil
		}
		sb.WriteByte('{')
		for i, key := range d.Keys {
			if i > 0 {
				sb.WriteString(itemSeparator)
			}
			newline(level + 1)
			appendPyJSONString(sb, key)
			sb.WriteString(keySeparator)
			if err := encodeValueJSONIndent(sb, d.Data[key], indent, level+1, itemSeparator, keySeparator); err != nil {
				return err
			}
		}
		newline(level)
		sb.WriteByte('}')
		return nil
	}
	return encodeValueJSON(sb, v, itemSeparator, keySeparator)
}
