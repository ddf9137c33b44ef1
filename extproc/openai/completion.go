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
	s, serr := openBody(body, lim, "model and prompt")
	if serr != nil {
		return nil, serr
	}
	r := &CompletionRequest{Body: body}
	var common requestFields
	havePrompt := false
	tokens := 0
	err := s.object(func(key string) *Error {
		if handled, err := common.read(s, key); handled {
			return at(key, err)
		}
		var err *Error
		switch key {
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
	r.Model, r.Stream, r.CacheSalt = common.Model, common.Stream, common.CacheSalt
	if !havePrompt || r.Prompts == nil {
		return nil, at("prompt", invalid("", "required"))
	}
	return r, nil
}

// parsePrompt reads prompt, `list[int] | list[list[int]] | str | list[str]
// | None` in vLLM's CompletionRequest, as pydantic's smart union picks a
// member (pydantic-core src/validators/union.rs: the most exact success
// wins, ties go to the first member): a string is a string; an array of
// arrays is token-id lists, each id as lax int takes it (laxTokenID); an
// array of strings only is text prompts (list[str] matches exactly even
// when every string is numeric); any other array is token ids if every
// element is one lax int takes ([1, "2", 3.0, true] is [1, 2, 3, 1]), and
// refused otherwise. tokens counts token ids across the request against
// MaxPromptTokens.
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
	// Both readings of a flat array are kept while they stay possible:
	// texts while every element is a string, flat while every element is
	// a lax int. Each is bounded by its own limit; one past its limit
	// stops growing and answers 413 only if it is the reading chosen.
	var (
		prompts           []Prompt
		flat              []uint32
		nested, scalar    bool
		allText, allIDs   = true, true
		textOver, idsOver *Error
		firstBad          = -1
		firstBadErr       *Error
		flatTokens        = *tokens
	)
	err = s.array(func(i int) *Error {
		k, err := s.peekKind()
		if err != nil {
			return err
		}
		if k == KindArray {
			if scalar {
				return at(index(i), invalid("", "expected a token id or a string like the elements before it, got an array"))
			}
			nested = true
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
			return nil
		}
		if nested {
			return at(index(i), invalid("", "expected an array of token ids like the elements before it, got %s", k))
		}
		scalar = true
		var text string
		isText := k == KindString
		id, idErr := readTokenIDFrom(s, k, &flatTokens, &text)
		if idErr != nil && idErr.Status == StatusRequestEntityTooLarge {
			if idsOver == nil {
				idsOver = at(index(i), idErr)
			}
			idErr = nil
		}
		if idErr != nil && !isText {
			// Neither reading takes it (a string does not fail here: it
			// may still be a text prompt).
			return at(index(i), idErr)
		}
		if idErr != nil {
			allIDs = false
			if firstBad < 0 {
				firstBad, firstBadErr = i, idErr
			}
		} else if allIDs && idsOver == nil {
			flat = append(flat, id)
		}
		if !isText {
			allText = false
		} else if allText && textOver == nil {
			if len(prompts) >= s.lim.MaxPrompts {
				textOver = tooLarge("", "more than %d prompts", s.lim.MaxPrompts)
			} else {
				prompts = append(prompts, Prompt{Text: text})
			}
		}
		if !allText && !allIDs {
			return at(index(firstBad), firstBadErr)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case nested:
		return prompts, nil
	case !scalar:
		return nil, invalid("", "must not be an empty array")
	case allText:
		if textOver != nil {
			return nil, textOver
		}
		return prompts, nil
	}
	if idsOver != nil {
		return nil, idsOver
	}
	*tokens = flatTokens
	return []Prompt{{IsTokens: true, TokenIDs: flat}}, nil
}

// readTokenID reads one element of a token-id list.
func readTokenID(s *scanner, tokens *int) (uint32, *Error) {
	k, err := s.peekKind()
	if err != nil {
		return 0, err
	}
	if k == KindArray || k == KindObject || k == KindNull {
		return 0, invalid("", "expected a token id, got %s", k)
	}
	var text string
	return readTokenIDFrom(s, k, tokens, &text)
}

// readTokenIDFrom reads a token id of kind k as pydantic's lax int takes
// it (laxInt: an int, a float without fraction, a bool, a numeric string);
// a string's text is left in *text either way, for the caller's other
// reading.
func readTokenIDFrom(s *scanner, k Kind, tokens *int, text *string) (uint32, *Error) {
	var n int64
	if k == KindString {
		str, err := s.readString()
		if err != nil {
			return 0, err
		}
		*text = str
		var ok bool
		if n, ok = strAsInt(str); !ok {
			return 0, invalid("", "expected a token id, got the string %q", truncate(str))
		}
	} else {
		p, err := laxInt(s)
		if err != nil {
			return 0, err
		}
		if p == nil {
			return 0, invalid("", "expected a token id, got null")
		}
		n = *p
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

// truncate shortens a client's string for an error message.
func truncate(s string) string {
	for i := range s {
		if i >= 32 {
			return s[:i] + "…"
		}
	}
	return s
}
