package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// describeJSONError turns encoding/json's errors into one line that names
// the field or byte offset at fault.
func describeJSONError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		return fmt.Errorf("field %q: want %s, got JSON %s (byte %d)", typ.Field, typ.Type, typ.Value, typ.Offset)
	case errors.Is(err, io.EOF):
		return errors.New("empty input: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("truncated JSON input")
	}
	return fmt.Errorf("invalid input: %v", err)
}
