package openai

// ModelOf reads the top-level "model" of a JSON object body on a route
// kvgate does not otherwise parse (/v1/embeddings, /v1/responses,
// /v1/messages, /tokenize, …), under lim, the way the engine's json.loads
// would (its encoding detected as json.loads does: jsonText; the last of
// repeated keys kept). ok
// is false when the body is not such an object or names no model as a
// string: the engine will answer that request itself.
func ModelOf(body []byte, lim Limits) (model string, ok bool) {
	s, serr := openBody(body, lim.withDefaults(), "model")
	if serr != nil {
		return "", false
	}
	err := s.object(func(key string) *Error {
		if key != "model" {
			return s.skip()
		}
		k, err := s.peekKind()
		if err != nil {
			return err
		}
		if k != KindString {
			model, ok = "", false
			return s.skip()
		}
		model, err = s.readString()
		ok = err == nil
		return err
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return "", false
	}
	return model, ok
}
