package openai

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Error is a request rejection in OpenAI's error shape. Status is the HTTP
// status kvgate answers with: 400 for a malformed or invalid body, 413 for one
// over a configured limit.
type Error struct {
	Status  int
	Message string
	Type    string
	Param   string
	Code    string

	where string // JSON path collected by at, applied by finish
}

func (e *Error) Error() string { return e.Message }

// JSON renders the error exactly as OpenAI does:
// {"error":{"message":…,"type":…,"param":…,"code":…}}, with null for an empty
// param or code.
func (e *Error) JSON() []byte {
	b := make([]byte, 0, 64+len(e.Message))
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, e.Message)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.Type)
	b = append(b, `,"param":`...)
	b = appendOptionalJSONString(b, e.Param)
	b = append(b, `,"code":`...)
	b = appendOptionalJSONString(b, e.Code)
	b = append(b, "}}"...)
	return b
}

// AnthropicJSON renders the error in the Anthropic Messages API's shape,
// {"type":"error","error":{"type":…,"message":…}}, carrying the OpenAI
// error's type and message as vLLM's /v1/messages route does
// (vllm/entrypoints/anthropic/api_router.py translate_error_response,
// commit 42fa4c096d406754b7e5c6d93835fe390487c8af).
func (e *Error) AnthropicJSON() []byte {
	b := make([]byte, 0, 48+len(e.Message))
	b = append(b, `{"type":"error","error":{"type":`...)
	b = appendJSONString(b, e.Type)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	return append(b, "}}"...)
}

func appendOptionalJSONString(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendJSONString(b, s)
}

// appendJSONString writes s as a JSON string; invalid UTF-8 becomes \ufffd so
// the output is always valid JSON.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < 0x80 {
			b = append(b, c)
			i++
			continue
		}
		if c < 0x80 {
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, `\u00`...)
				b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

func invalid(param, format string, args ...any) *Error {
	return &Error{
		Status:  StatusBadRequest,
		Message: fmt.Sprintf(format, args...),
		Type:    "invalid_request_error",
		Param:   param,
	}
}

func tooLarge(param, format string, args ...any) *Error {
	return &Error{
		Status:  StatusRequestEntityTooLarge,
		Message: fmt.Sprintf(format, args...),
		Type:    "invalid_request_error",
		Param:   param,
		Code:    "request_too_large",
	}
}

// at records that err concerns the JSON path segment seg (a key, or an
// index written "[i]"), as errors bubble up from nested values; finish turns
// the collected path into the message prefix and param, so messages read
// "messages[3].content[1]: unknown content part type \"foo\"".
func at(seg string, err *Error) *Error {
	if err == nil {
		return nil
	}
	e := *err
	switch {
	case e.where == "":
		e.where = seg
	case e.where[0] == '[':
		e.where = seg + e.where
	default:
		e.where = seg + "." + e.where
	}
	return &e
}

func finish(err *Error) *Error {
	if err == nil || err.where == "" {
		return err
	}
	e := *err
	e.Message = e.where + ": " + e.Message
	if e.Param == "" {
		e.Param = e.where
	}
	e.where = ""
	return &e
}

func index(i int) string { return "[" + strconv.Itoa(i) + "]" }

// ModelNotFound is the answer to a request naming a model no engine
// serves, worded as vLLM words it (404 model_not_found), on every route.
func ModelNotFound(model string) *Error {
	return &Error{Status: StatusNotFound, Message: fmt.Sprintf("The model `%s` does not exist.", model),
		Type: "invalid_request_error", Param: "model", Code: "model_not_found"}
}
