package openai

import "math"

// CompletionRequest is what kvgate needs from a /v1/completions body.
type CompletionRequest struct {
	Body         []byte
	Model        string
	Stream       bool
	MaxTokens    int64
	HasMaxTokens bool
	// Prompts holds one entry per prompt: the body's prompt may be a string,
	// a list of strings, a list of token ids, or a list of token-id lists.
	Prompts []Prompt
	// CacheSalt is the request's cache_salt; "" when absent.
	CacheSalt string
}

// Prompt is one completions prompt, text or token ids.
type Prompt struct {
	IsTokens bool
	Text     string
	TokenIDs []uint32
}

// ParseCompletion parses a /v1/completions body in one pass.
func ParseCompletion(body []byte, lim Limits) (*CompletionRequest, error) {
	r, err := parseCompletion(body, lim)
	if err != nil {
		return nil, finish(err)
	}
	return r, nil
}

func parseCompletion(body []byte, lim Limits) (*CompletionRequest, *Error) {
	lim = lim.withDefaults()
	if len(body) > lim.MaxBodyBytes {
		return nil, tooLarge("", "request body of %d bytes exceeds the %d-byte limit", len(body), lim.MaxBodyBytes)
	}
	if len(body) == 0 {
		return nil, invalid("", "request body is empty: want a JSON object with model and prompt")
	}
	s := newScanner(body, lim)
	r := &CompletionRequest{Body: body}
	if s.peek() != '{' {
		return nil, invalid("", "request body must be a JSON object")
	}
	havePrompt := false
	tokens := 0
	err := s.object(func(key string) *Error {
		var err *Error
		switch key {
		case "model":
			r.Model, err = optionalString(s)
		case "cache_salt":
			r.CacheSalt, err = cacheSalt(s)
		case "stream":
			r.Stream, err = optionalBool(s, false)
		case "max_tokens":
			var n *int64
			if n, err = optionalInt(s); n != nil {
				if err = checkMaxTokens("", n, lim); err == nil {
					r.MaxTokens, r.HasMaxTokens = *n, true
				}
			}
		case "prompt":
			havePrompt = true
			tokens = 0
			r.Prompts, err = parsePrompt(s, &tokens)
		default:
			err = s.skip()
		}
		return at(key, err)
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return nil, err
	}
	if !havePrompt || r.Prompts == nil {
		return nil, at("prompt", invalid("", "required"))
	}
	return r, nil
}

// parsePrompt reads the four shapes OpenAI allows for prompt. tokens counts
// token ids across the request against MaxPromptTokens.
func parsePrompt(s *scanner, tokens *int) ([]Prompt, *Error) {
	k, err := s.peekKind()
	if err != nil {
		return nil, err
	}
	switch k {
	case KindNull:
		return nil, s.literal("null")
	case KindString:
		text, err := s.readString()
		return []Prompt{{Text: text}}, err
	case KindArray:
	default:
		return nil, invalid("", "expected a string, an array of strings, an array of token ids or an array of token-id arrays, got %s", k)
	}
	// The first element decides the shape; every later one must match it.
	var prompts []Prompt
	var shape Kind
	var flat []uint32
	err = s.array(func(i int) *Error {
		k, err := s.peekKind()
		if err != nil {
			return err
		}
		if i == 0 {
			shape = k
		} else if k != shape {
			return at(index(i), invalid("", "expected %s like the first element, got %s", shape, k))
		}
		switch k {
		case KindNumber:
			id, err := readTokenID(s, tokens)
			if err != nil {
				return at(index(i), err)
			}
			flat = append(flat, id)
		case KindString:
			if len(prompts) >= s.lim.MaxPrompts {
				return tooLarge("", "more than %d prompts", s.lim.MaxPrompts)
			}
			text, err := s.readString()
			if err != nil {
				return at(index(i), err)
			}
			prompts = append(prompts, Prompt{Text: text})
		case KindArray:
			if len(prompts) >= s.lim.MaxPrompts {
				return tooLarge("", "more than %d prompts", s.lim.MaxPrompts)
			}
			ids := []uint32{}
			err := s.array(func(j int) *Error {
				id, err := readTokenID(s, tokens)
				if err != nil {
					return at(index(j), err)
				}
				ids = append(ids, id)
				return nil
			})
			if err != nil {
				return at(index(i), err)
			}
			if len(ids) == 0 {
				return at(index(i), invalid("", "token-id prompt must not be empty"))
			}
			prompts = append(prompts, Prompt{IsTokens: true, TokenIDs: ids})
		default:
			return at(index(i), invalid("", "expected a string, a token id or an array of token ids, got %s", k))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if shape == KindNumber {
		return []Prompt{{IsTokens: true, TokenIDs: flat}}, nil
	}
	if len(prompts) == 0 {
		return nil, invalid("", "must not be an empty array")
	}
	return prompts, nil
}

func readTokenID(s *scanner, tokens *int) (uint32, *Error) {
	if k, err := s.peekKind(); err != nil {
		return 0, err
	} else if k != KindNumber {
		return 0, invalid("", "expected a token id, got %s", k)
	}
	n, err := s.readInt()
	if err != nil {
		return 0, err
	}
	if n < 0 || n > math.MaxUint32 {
		return 0, invalid("", "token id %d out of range", n)
	}
	*tokens++
	if *tokens > s.lim.MaxPromptTokens {
		return 0, tooLarge("", "more than %d prompt token ids", s.lim.MaxPromptTokens)
	}
	return uint32(n), nil
}
