package openai

// Kind is the JSON type of a Value.
type Kind uint8

const (
	KindNull Kind = iota
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

func (k Kind) String() string {
	switch k {
	case KindNull:
		return "null"
	case KindBool:
		return "boolean"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindArray:
		return "array"
	case KindObject:
		return "object"
	}
	return "unknown"
}

// Value is a JSON value that keeps object members in insertion order, because
// chat templates print tools and tool-call arguments with tojson, which in
// Python (json.dumps, sort_keys=False) keeps the order the client sent.
type Value struct {
	Kind Kind
	Bool bool
	// Text is a string's decoded contents or a number's literal as written
	// (kept verbatim so 1.0 and 1 stay distinct, as in Python).
	Text    string
	Items   []Value
	Members []Member
}

// Member is one key/value pair of a JSON object.
type Member struct {
	Key   string
	Value Value
}

// Get returns the member named key. Keys are unique: on a duplicate key the
// decoder keeps the last value at the first key's position, as Python's
// json.loads does.
func (v Value) Get(key string) (Value, bool) {
	for _, m := range v.Members {
		if m.Key == key {
			return m.Value, true
		}
	}
	return Value{}, false
}

// AppendJSON writes v as compact JSON.
func (v Value) AppendJSON(b []byte) []byte {
	switch v.Kind {
	case KindNull:
		return append(b, "null"...)
	case KindBool:
		if v.Bool {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case KindNumber:
		return append(b, v.Text...)
	case KindString:
		return appendJSONString(b, v.Text)
	case KindArray:
		b = append(b, '[')
		for i, it := range v.Items {
			if i > 0 {
				b = append(b, ',')
			}
			b = it.AppendJSON(b)
		}
		return append(b, ']')
	case KindObject:
		b = append(b, '{')
		for i, m := range v.Members {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m.Key)
			b = append(b, ':')
			b = m.Value.AppendJSON(b)
		}
		return append(b, '}')
	}
	return append(b, "null"...)
}
