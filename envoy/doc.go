// Package envoy checks Envoy configurations before Envoy sees them:
// the standalone bootstraps shipped in this folder, the Envoy fragments
// embedded in Istio EnvoyFilter and Envoy Gateway EnvoyPatchPolicy objects,
// and the EnvoyExtensionPolicy and DestinationRule that go with them.
//
// The package lives in the envoy/ folder next to the YAML it checks, so its
// tests read the shipped files directly.
//
// Checks, in order, each reported with the field path it concerns:
//  1. the YAML parses into JSON values;
//  2. a walk of those values against the proto descriptors: every field
//     known, every enum a defined name or number, every Any's @type
//     registered (protojson accepts any enum number, so this is the only
//     place undefined numbers are caught);
//  3. protojson.Unmarshal (DiscardUnknown false) into the target message;
//  4. the protoc-gen-validate rules (ValidateAll) on the message and on the
//     payload of every Any inside it, recursively, since ValidateAll stops
//     at an Any;
//  5. Envoy's start-up rules that live in C++ rather than in the protos
//     (ORIGINAL_DST needs CLUSTER_PROVIDED, FULL_DUPLEX_STREAMED needs
//     trailer SEND and fail-closed, referenced clusters exist, the router
//     is the last HTTP filter) and kvgate's own contract (ext_proc may write
//     the metadata namespace the routing reads; the metadata path is
//     x-gateway-destination-endpoint).
//
// The core API (bootstrap, listener, cluster, route, endpoint and what they
// import) is linked, and of the extension types the ones kvgate's configs
// use and those commonly beside them (extensions.go, ExtensionTypes); any
// other @type is reported as unknown, naming that list.
package envoy
