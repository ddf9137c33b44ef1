package chattemplate

import "strings"

// tag is one {{ }}, {% %} or {# #} of a template source.
type tag struct {
	block                 bool // {% %} or {# #}: the tags trim_blocks/lstrip_blocks act on
	trimLeft, trimRight   bool // "-" markers
	textBefore, textAfter bool // whether text (not another tag) touches each side
	before, after         string
}

// trimHazard reports whether src has a layout on which ardanlabs/jinja
// v1.8.0's whitespace control differs from Python jinja2. The engine applies
// a tag's trimming (trim_blocks, lstrip_blocks, "-") to the nearest text
// segment even when other tags stand between, where Python only touches text
// directly adjacent to the tag: `{% if x %}{{ y }}\n` loses its newline in Go.
// It is checked when compiling so renders of such templates count as inexact.
func trimHazard(src string) bool {
	tags := scanTags(src)
	for i, t := range tags {
		trimsRight := t.trimRight || t.block
		trimsLeft := t.trimLeft || t.block
		if trimsRight && !t.textAfter && i+1 < len(tags) {
			// Text reached past the neighbouring tag(s).
			for j := i + 1; j < len(tags); j++ {
				if tags[j].textBefore {
					if strings.TrimLeft(tags[j].before, " \t\r\n") != tags[j].before {
						return true
					}
					break
				}
			}
		}
		if trimsLeft && !t.textBefore && i > 0 {
			for j := i - 1; j >= 0; j-- {
				if tags[j].textAfter {
					if strings.TrimRight(tags[j].after, " \t\r\n") != tags[j].after {
						return true
					}
					break
				}
			}
		}
	}
	return false
}

// scanTags splits src into tags the way the engine's scanner does (quotes
// inside tags respected, comments raw), recording the text around each.
func scanTags(src string) []tag {
	var tags []tag
	textStart := 0
	for i := 0; i+1 < len(src); {
		if src[i] != '{' || (src[i+1] != '{' && src[i+1] != '%' && src[i+1] != '#') {
			i++
			continue
		}
		kind := src[i+1]
		closer := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[kind]
		t := tag{block: kind != '{'}
		t.before = src[textStart:i]
		t.textBefore = i > textStart
		if len(tags) > 0 {
			prev := &tags[len(tags)-1]
			prev.after, prev.textAfter = t.before, t.textBefore
		}
		j := i + 2
		if j < len(src) && src[j] == '-' {
			t.trimLeft = true
		}
		end := -1
		for j < len(src) {
			c := src[j]
			if kind != '#' && (c == '\'' || c == '"') {
				j++
				for j < len(src) && src[j] != c {
					if src[j] == '\\' {
						j++
					}
					j++
				}
				j++
				continue
			}
			if strings.HasPrefix(src[j:], closer) {
				t.trimRight = j > i+2 && src[j-1] == '-'
				end = j + 2
				break
			}
			j++
		}
		if end < 0 {
			break // unclosed: Compile reports it
		}
		tags = append(tags, t)
		i, textStart = end, end
	}
	if len(tags) > 0 {
		last := &tags[len(tags)-1]
		last.after, last.textAfter = src[textStart:], textStart < len(src)
	}
	return tags
}
