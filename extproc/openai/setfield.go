package openai

// SetField returns body with the top-level member key set to raw (one JSON
// value), leaving every other byte as it was, so a mutated request differs
// from the client's only where kvgate changed it (e.g. P/D's
// kv_transfer_params). An existing member is replaced in place (the last one
// when the key repeats, since that is the one a JSON reader keeps); a new one
// is appended before the closing brace. body and raw are validated under lim.
func SetField(body []byte, key string, raw []byte, lim Limits) ([]byte, error) {
	out, err := setField(body, key, raw, lim)
	if err != nil {
		return nil, finish(err)
	}
	return out, nil
}

func setField(body []byte, key string, raw []byte, lim Limits) ([]byte, *Error) {
	lim = lim.withDefaults()
	if len(body) > lim.MaxBodyBytes {
		return nil, tooLarge("", "request body of %d bytes exceeds the %d-byte limit", len(body), lim.MaxBodyBytes)
	}
	rs := newScanner(raw, lim)
	if err := rs.skip(); err != nil {
		return nil, at(key, err)
	}
	if err := rs.end(); err != nil {
		return nil, at(key, err)
	}
	rawStart := 0
	for rawStart < len(raw) && (raw[rawStart] == ' ' || raw[rawStart] == '\t' || raw[rawStart] == '\n' || raw[rawStart] == '\r') {
		rawStart++
	}
	rawEnd := len(raw)
	for rawEnd > rawStart && (raw[rawEnd-1] == ' ' || raw[rawEnd-1] == '\t' || raw[rawEnd-1] == '\n' || raw[rawEnd-1] == '\r') {
		rawEnd--
	}
	raw = raw[rawStart:rawEnd]

	s := newScanner(body, lim)
	if s.peek() != '{' {
		return nil, invalid("", "request body must be a JSON object")
	}
	valStart, valEnd := -1, -1
	members := 0
	err := s.object(func(k string) *Error {
		members++
		s.skipSpace()
		start := s.pos
		if err := s.skip(); err != nil {
			return at(k, err)
		}
		if k == key {
			valStart, valEnd = start, s.pos
		}
		return nil
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return nil, err
	}
	if valStart >= 0 {
		out := make([]byte, 0, len(body)-(valEnd-valStart)+len(raw))
		out = append(out, body[:valStart]...)
		out = append(out, raw...)
		return append(out, body[valEnd:]...), nil
	}
	// Insert before the closing brace: the last '}' in the body, since only
	// whitespace may follow the top-level object.
	closing := len(body) - 1
	for body[closing] != '}' {
		closing--
	}
	out := make([]byte, 0, len(body)+len(key)+len(raw)+8)
	out = append(out, body[:closing]...)
	if members > 0 {
		out = append(out, ',')
	}
	out = appendJSONString(out, key)
	out = append(out, ':')
	out = append(out, raw...)
	return append(out, body[closing:]...), nil
}
