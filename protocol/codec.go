// Package protocol holds the JSON-RPC 2.0 envelope and the ACP v1 types.
//
// Every encode and decode of the server goes through this file, so the JSON
// library (goccy/go-json, pinned at v0.12.0) can be swapped in one place.
package protocol

import (
	json "github.com/goccy/go-json"
)

// RawMessage is a raw encoded JSON value.
type RawMessage = json.RawMessage

// Marshal encodes v without HTML escaping (ACP peers never embed JSON in HTML,
// and escaping costs bytes and time on every streamed chunk).
func Marshal(v any) ([]byte, error) { return json.MarshalNoEscape(v) }

// Unmarshal decodes data into v. The decoder copies what it keeps, so data
// may be reused by the caller afterwards.
func Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Valid reports whether data is one syntactically valid JSON value.
func Valid(data []byte) bool { return json.Valid(data) }

// MustMarshal encodes values that cannot fail to encode (plain structs of
// strings, numbers and raw JSON). It panics on a programming error.
func MustMarshal(v any) []byte {
	b, err := Marshal(v)
	if err != nil {
		panic("protocol: encode: " + err.Error())
	}
	return b
}
