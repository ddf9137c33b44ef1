package openai

// cacheSalt reads the request's cache_salt (vLLM's prefix-cache isolation
// key): null or absent means none; otherwise a non-empty string, as
// vllm/entrypoints/openai/protocol.py check_cache_salt_support demands
// ("Parameter 'cache_salt' must be a non-empty string if provided."). The
// engine salts the request's blocks with it, so kvgate hashes the request
// under it too (preprocess, Dynamo's cache_namespace).
func cacheSalt(s *scanner) (string, *Error) {
	const msg = "Parameter 'cache_salt' must be a non-empty string if provided."
	v, err := orNull(s, KindString, s.readStringPtr, func(Kind) *Error { return invalid("", msg) })
	switch {
	case err != nil || v == nil:
		return "", err
	case *v == "":
		return "", invalid("", msg)
	}
	return *v, nil
}
