package openai

// The readers of a request's optional fields, written once for every
// endpoint's parser (issue 28): each field is `X | None` in vLLM's request
// models, so null (or absence) gives the zero value, a value of the
// declared JSON kind is read, and any other kind is refused with the
// field's own message.

// openBody checks a body against the size bounds, decodes it as the
// engine's json.loads would (jsonText) and positions a scanner on its
// top-level object. want names the required members, for the empty-body
// message.
func openBody(body []byte, lim Limits, want string) (*scanner, *Error) {
	if len(body) > lim.MaxBodyBytes {
		return nil, tooLarge("", "request body of %d bytes exceeds the %d-byte limit", len(body), lim.MaxBodyBytes)
	}
	if len(body) == 0 {
		return nil, invalid("", "request body is empty: want a JSON object with %s", want)
	}
	text, terr := jsonText(body)
	if terr != nil {
		return nil, terr
	}
	s := newScanner(text, lim)
	if s.peek() != '{' {
		return nil, invalid("", "request body must be a JSON object")
	}
	return s, nil
}

// orNull reads a nullable field: null gives T's zero value, a value of
// kind want is read by read, and any other kind is refused with
// mismatch's error.
func orNull[T any](s *scanner, want Kind, read func() (T, *Error), mismatch func(got Kind) *Error) (T, *Error) {
	var zero T
	k, err := s.peekKind()
	if err != nil {
		return zero, err
	}
	switch k {
	case KindNull:
		return zero, s.literal("null")
	case want:
		return read()
	}
	return zero, mismatch(k)
}

func expected(what string) func(Kind) *Error {
	return func(k Kind) *Error { return invalid("", "expected %s, got %s", what, k) }
}

func optionalString(s *scanner) (string, *Error) {
	return orNull(s, KindString, s.readString, expected("a string"))
}

func optionalStringPtr(s *scanner) (*string, *Error) {
	return orNull(s, KindString, s.readStringPtr, expected("a string"))
}

func (s *scanner) readStringPtr() (*string, *Error) {
	str, err := s.readString()
	return &str, err
}

// optionalInt reads an `int | None` output-length bound with pydantic's
// lax coercions (laxInt). A negative one is refused: vLLM's SamplingParams
// refuses it too (400), after the model validated it.
func optionalInt(s *scanner) (*int64, *Error) {
	n, err := laxInt(s)
	if err != nil || n == nil {
		return nil, err
	}
	if *n < 0 {
		return nil, invalid("", "must not be negative, got %d", *n)
	}
	return n, nil
}

// checkMaxTokens refuses an output-length bound no engine could honour.
func checkMaxTokens(name string, n *int64, lim Limits) *Error {
	if n != nil && *n > lim.MaxOutputTokens {
		return at(name, invalid("", "%d is more than the %d tokens kvgate accepts", *n, lim.MaxOutputTokens))
	}
	return nil
}

// optionalObject reads an object's members in order (nil for null).
func optionalObject(s *scanner) ([]Member, *Error) {
	return orNull(s, KindObject, func() ([]Member, *Error) {
		v, err := s.value()
		if v.Members == nil {
			v.Members = []Member{}
		}
		return v.Members, err
	}, expected("an object"))
}

// objectList reads an array of objects (nil for null).
func objectList(s *scanner) ([]Value, *Error) {
	return orNull(s, KindArray, func() ([]Value, *Error) {
		out := []Value{}
		err := s.array(func(i int) *Error {
			if k, err := s.peekKind(); err != nil {
				return err
			} else if k != KindObject {
				return at(index(i), invalid("", "expected an object, got %s", k))
			}
			v, err := s.value()
			if err != nil {
				return at(index(i), err)
			}
			out = append(out, v)
			return nil
		})
		return out, err
	}, expected("an array of objects"))
}

// requestFields are the top-level fields every endpoint's request model
// shares: model, stream and cache_salt (vLLM's OpenAIBaseModel subclasses
// each declare them the same way).
type requestFields struct {
	Model     string
	Stream    bool
	CacheSalt string
}

// read reads key into f when it is one of the shared fields; handled is
// false for any other key, which the caller reads itself.
func (f *requestFields) read(s *scanner, key string) (handled bool, err *Error) {
	switch key {
	case "model":
		f.Model, err = optionalString(s)
	case "stream":
		f.Stream, _, err = laxBool(s, true, false)
	case "cache_salt":
		f.CacheSalt, err = cacheSalt(s)
	default:
		return false, nil
	}
	return true, err
}
