package envoy

import (
	"encoding/json"

	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/kvgate/kvgate/internal/didyoumean"
)

// decodeMessage checks the JSON value v against msg's descriptor and, if it
// fits, unmarshals it into msg. partial marks a fragment that is merged into
// a larger config (an Istio MERGE, a JSON patch below the root): its
// required fields may legitimately be missing, so the validate rules are
// not applied to it. It reports whether msg was filled.
func decodeMessage(ps *problems, path string, v any, msg proto.Message, partial bool) bool {
	before := len(ps.list)
	checkJSON(ps, path, v, msg.ProtoReflect().Descriptor(), 0)
	if len(ps.list) > before {
		return false
	}
	data, err := json.Marshal(v)
	if err != nil {
		ps.add(path, "cannot encode as JSON: %v", err)
		return false
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(data, msg); err != nil {
		// checkJSON found names and enums fine, so this is a value of the
		// wrong type or format (a string for a number, a bad duration).
		ps.add(path, "%s", strings.TrimPrefix(err.Error(), "proto: "))
		return false
	}
	if !partial {
		validateTree(ps, path, msg)
	}
	return true
}

// Well-known types whose JSON form is not an object of their fields;
// protojson checks their syntax.
var opaqueJSONTypes = map[protoreflect.FullName]bool{
	"google.protobuf.Struct":      true,
	"google.protobuf.Value":       true,
	"google.protobuf.ListValue":   true,
	"google.protobuf.Duration":    true,
	"google.protobuf.Timestamp":   true,
	"google.protobuf.FieldMask":   true,
	"google.protobuf.Empty":       true,
	"google.protobuf.DoubleValue": true,
	"google.protobuf.FloatValue":  true,
	"google.protobuf.Int64Value":  true,
	"google.protobuf.UInt64Value": true,
	"google.protobuf.Int32Value":  true,
	"google.protobuf.UInt32Value": true,
	"google.protobuf.BoolValue":   true,
	"google.protobuf.StringValue": true,
	"google.protobuf.BytesValue":  true,
}

const anyFullName = "google.protobuf.Any"

// checkJSON walks a JSON value against a message descriptor and reports
// unknown fields, enum values that name or number no defined value, and Any
// types that are not registered, each at its path. It recurses into Any
// payloads with the payload's own descriptor.
func checkJSON(ps *problems, path string, v any, md protoreflect.MessageDescriptor, depth int) {
	if v == nil || depth > maxDepth {
		return
	}
	if md.FullName() == "google.protobuf.Duration" {
		checkDurationJSON(ps, path, v)
		return
	}
	if opaqueJSONTypes[md.FullName()] {
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		ps.add(path, "expected an object (%s), got %s", md.FullName(), jsonKind(v))
		return
	}
	if md.FullName() == anyFullName {
		checkAnyJSON(ps, path, obj, depth)
		return
	}
	for _, name := range sortedKeys(obj) {
		fd := lookupField(md, name)
		if fd == nil {
			ps.add(field(path, name), "unknown field %q in %s%s", name, md.FullName(), suggestField(md, name))
			continue
		}
		checkFieldJSON(ps, field(path, string(fd.Name())), obj[name], fd, depth)
	}
}

func checkAnyJSON(ps *problems, path string, obj map[string]any, depth int) {
	url, ok := obj["@type"].(string)
	if !ok {
		ps.add(field(path, "@type"), "an Any needs an \"@type\" string naming its payload type")
		return
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		ps.add(field(path, "@type"), "unknown type %q%s", url, suggestExtension(url))
		return
	}
	md := mt.Descriptor()
	if opaqueJSONTypes[md.FullName()] {
		return // payload is under "value"; protojson checks it
	}
	rest := make(map[string]any, len(obj))
	for k, e := range obj {
		if k != "@type" {
			rest[k] = e
		}
	}
	checkJSON(ps, path, rest, md, depth+1)
}

func checkFieldJSON(ps *problems, path string, v any, fd protoreflect.FieldDescriptor, depth int) {
	if v == nil {
		return // null leaves the field unset
	}
	switch {
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			ps.add(path, "expected a map, got %s", jsonKind(v))
			return
		}
		for _, k := range sortedKeys(obj) {
			checkSingularJSON(ps, key(path, k), obj[k], fd.MapValue(), depth)
		}
	case fd.IsList():
		list, ok := v.([]any)
		if !ok {
			ps.add(path, "expected a list, got %s", jsonKind(v))
			return
		}
		for i, e := range list {
			checkSingularJSON(ps, index(path, i), e, fd, depth)
		}
	default:
		checkSingularJSON(ps, path, v, fd, depth)
	}
}

func checkSingularJSON(ps *problems, path string, v any, fd protoreflect.FieldDescriptor, depth int) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		checkJSON(ps, path, v, fd.Message(), depth+1)
	case protoreflect.EnumKind:
		checkEnumJSON(ps, path, v, fd.Enum())
	default:
		checkScalarJSON(ps, path, v, fd.Kind())
	}
}

func checkEnumJSON(ps *problems, path string, v any, ed protoreflect.EnumDescriptor) {
	if ed.FullName() == "google.protobuf.NullValue" || v == nil {
		return
	}
	switch x := v.(type) {
	case string:
		if ed.Values().ByName(protoreflect.Name(x)) == nil {
			ps.add(path, "%q is not a value of enum %s (values: %s)", x, ed.FullName(), enumNames(ed))
		}
	case int64, uint64, float64:
		n, ok := integral(x)
		if !ok || ed.Values().ByNumber(protoreflect.EnumNumber(n)) == nil {
			ps.add(path, "%v is not a defined number of enum %s (values: %s)", x, ed.FullName(), enumNames(ed))
		}
	default:
		ps.add(path, "expected an enum name of %s, got %s", ed.FullName(), jsonKind(v))
	}
}

func integral(v any) (int32, bool) {
	switch x := v.(type) {
	case int64:
		return int32(x), x >= math.MinInt32 && x <= math.MaxInt32
	case uint64:
		return int32(x), x <= math.MaxInt32
	case float64:
		return int32(x), x == math.Trunc(x) && x >= math.MinInt32 && x <= math.MaxInt32
	}
	return 0, false
}

func enumNames(ed protoreflect.EnumDescriptor) string {
	vals := ed.Values()
	names := make([]string, vals.Len())
	for i := range names {
		names[i] = string(vals.Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// lookupField finds a field by JSON name or proto name, as protojson does.
func lookupField(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	fields := md.Fields()
	if fd := fields.ByJSONName(name); fd != nil {
		return fd
	}
	if fd := fields.ByName(protoreflect.Name(name)); fd != nil && !fd.IsExtension() {
		return fd
	}
	return nil
}

// suggestField names the closest field when a name looks misspelt.
func suggestField(md protoreflect.MessageDescriptor, name string) string {
	fields := md.Fields()
	names := make([]string, fields.Len())
	for i := range names {
		names[i] = string(fields.Get(i).Name())
	}
	best := didyoumean.Closest(strings.ToLower(name), names)
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	default:
		return "a number"
	}
}

// validateTree applies the protoc-gen-validate rules to msg and, because
// ValidateAll does not look inside an Any, to every Any payload below it.
func validateTree(ps *problems, path string, msg proto.Message) {
	walkMessages(path, msg, func(p string, m proto.Message, viaAny bool) {
		// ValidateAll is recursive through ordinary fields, so call it only
		// at the root and at each Any payload.
		if p != path && !viaAny {
			return
		}
		v, ok := m.(interface{ ValidateAll() error })
		if !ok {
			return
		}
		if err := v.ValidateAll(); err != nil {
			addValidationErrors(ps, p, m.ProtoReflect().Descriptor(), err)
		}
	})
}

// walkMessages calls visit for msg and every message below it, descending
// into Any payloads (viaAny is true for an unpacked payload; its path is
// the path of the Any). Fields are visited in declaration order so that
// problems come out in a stable order.
func walkMessages(path string, msg proto.Message, visit func(path string, m proto.Message, viaAny bool)) {
	walkReflect(path, msg.ProtoReflect(), false, visit, 0)
}

func walkReflect(path string, m protoreflect.Message, viaAny bool, visit func(string, proto.Message, bool), depth int) {
	if depth > maxDepth {
		return
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		payload, err := a.UnmarshalNew()
		if err == nil {
			walkReflect(path, payload.ProtoReflect(), true, visit, depth+1)
		}
		return
	}
	visit(path, m.Interface(), viaAny)
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) || (fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind) {
			continue
		}
		p := field(path, string(fd.Name()))
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				continue
			}
			m.Get(fd).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				walkReflect(key(p, k.String()), v.Message(), false, visit, depth+1)
				return true
			})
		case fd.IsList():
			list := m.Get(fd).List()
			for j := 0; j < list.Len(); j++ {
				walkReflect(index(p, j), list.Get(j).Message(), false, visit, depth+1)
			}
		default:
			walkReflect(p, m.Get(fd).Message(), false, visit, depth+1)
		}
	}
}

// The error types protoc-gen-validate generates for every message.
type fieldValidationError interface {
	Field() string
	Reason() string
	Cause() error
}

type multiValidationError interface {
	AllErrors() []error
}

// addValidationErrors turns a protoc-gen-validate error chain into problems
// at proto field paths. Its errors name fields by Go name ("Clusters[1]")
// and nest "embedded message failed validation" errors one level per
// message, which this follows down to the field that broke the rule.
func addValidationErrors(ps *problems, path string, md protoreflect.MessageDescriptor, err error) {
	if multi, ok := err.(multiValidationError); ok && !isFieldError(err) {
		for _, e := range multi.AllErrors() {
			addValidationErrors(ps, path, md, e)
		}
		return
	}
	fe, ok := err.(fieldValidationError)
	if !ok {
		ps.add(path, "%v", err)
		return
	}
	goName, suffix, _ := strings.Cut(fe.Field(), "[")
	if suffix != "" {
		suffix = "[" + suffix
	}
	name, child := fieldByGoName(md, goName)
	p := field(path, name) + suffix
	cause := fe.Cause()
	if cause != nil && child != nil && (isFieldError(cause) || isMultiError(cause)) {
		addValidationErrors(ps, p, child, cause)
		return
	}
	if cause != nil {
		ps.add(p, "%s: %v", fe.Reason(), cause)
		return
	}
	ps.add(p, "%s", fe.Reason())
}

func isFieldError(err error) bool {
	_, ok := err.(fieldValidationError)
	return ok
}

func isMultiError(err error) bool {
	_, ok := err.(multiValidationError)
	return ok
}

// fieldByGoName maps a Go field (or oneof) name back to the proto name and,
// for message fields, the descriptor of the message a nested error is in.
func fieldByGoName(md protoreflect.MessageDescriptor, goName string) (string, protoreflect.MessageDescriptor) {
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if goCamelCase(string(fd.Name())) != goName {
			continue
		}
		switch {
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			return string(fd.Name()), fd.MapValue().Message()
		case fd.Kind() == protoreflect.MessageKind:
			return string(fd.Name()), fd.Message()
		default:
			return string(fd.Name()), nil
		}
	}
	oneofs := md.Oneofs()
	for i := 0; i < oneofs.Len(); i++ {
		if od := oneofs.Get(i); goCamelCase(string(od.Name())) == goName {
			return string(od.Name()), nil
		}
	}
	return goName, nil
}

// goCamelCase is protoc-gen-go's field-name mangling (protogen.GoCamelCase).
func goCamelCase(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.' && i+1 < len(s) && isLower(s[i+1]):
		case c == '.':
			b = append(b, '_')
		case c == '_' && (i == 0 || s[i-1] == '.'):
			b = append(b, 'X')
		case c == '_' && i+1 < len(s) && isLower(s[i+1]):
		case c >= '0' && c <= '9':
			b = append(b, c)
		default:
			if isLower(c) {
				c -= 'a' - 'A'
			}
			b = append(b, c)
			for ; i+1 < len(s) && isLower(s[i+1]); i++ {
				b = append(b, s[i+1])
			}
		}
	}
	return string(b)
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }

// newMsgFor makes an empty message of a registered type.
func newMsgFor(md protoreflect.MessageDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return nil
	}
	return mt.New().Interface()
}

// protobuf JSON duration: seconds with up to nine fractional digits and an
// "s" suffix ("0.5s", not "500ms").
var durationJSON = regexp.MustCompile(`^-?[0-9]+(\.[0-9]{1,9})?s$`)

func checkDurationJSON(ps *problems, path string, v any) {
	s, ok := v.(string)
	if !ok || !durationJSON.MatchString(s) {
		ps.add(path, "%v is not a protobuf JSON duration: seconds with an s suffix, e.g. \"0.5s\" or \"30s\"", describeJSON(v))
	}
}

// checkScalarJSON reports a scalar field given a JSON value protojson would
// refuse, so the problem carries its path.
func checkScalarJSON(ps *problems, path string, v any, kind protoreflect.Kind) {
	switch kind {
	case protoreflect.StringKind, protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			ps.add(path, "expected a string, got %s", jsonKind(v))
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			ps.add(path, "expected true or false, got %s", jsonKind(v))
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch v.(type) {
		case float64, int64, uint64, string:
		default:
			ps.add(path, "expected a number, got %s", jsonKind(v))
		}
	default: // the integer kinds
		switch x := v.(type) {
		case int64, uint64:
		case float64:
			if x != math.Trunc(x) {
				ps.add(path, "expected an integer, got %v", x)
			}
		case string:
			if _, err := strconv.ParseInt(x, 10, 64); err != nil {
				if _, err := strconv.ParseUint(x, 10, 64); err != nil {
					ps.add(path, "expected an integer, got %q", x)
				}
			}
		default:
			ps.add(path, "expected an integer, got %s", jsonKind(v))
		}
	}
}

func describeJSON(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return jsonKind(v)
}
