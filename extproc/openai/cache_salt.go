package openai

// cacheSalt reads the request's cache_salt (vLLM's prefix-cache isolation
// key): null or absent means none; otherwise a non-empty string, as
// vllm/entrypoints/openai/protocol.py check_cache_salt_support demands
// ("Parameter 'cache_salt' must be a non-empty string if provided."). The
// engine salts the request's blocks with it, so kvgate hashes the request
// under it too (preprocess, Dynamo's cache_namespace).
func cacheSalt(s *scanner) (string, *Error) {
	k, err := s.peekKind()
	if err != nil {
		return "", err
	}
	if k == KindNull {
		return "", s.literal("null")
	}
	if k != KindString {
		return "", invalid("", "Parameter 'cache_salt' must be a non-empty string if provided.")
	}
	v, err := s.readString()
	if err != nil {
		return "", err
	}
	if v == "" {
		return "", invalid("", "Parameter 'cache_salt' must be a non-empty string if provided.")
	}
	return v, nil
}
