package api

import (
	"encoding/json"
	"net/http"
)

// MetadataHeader carries an HTTP upload's metadata (a PUT's body is the
// file itself): one JSON object of strings, keys exactly as given. The
// header's size is the HTTP server's header bound; the session bounds the
// map (4096 bytes in all).
const MetadataHeader = "Jailcell-Metadata"

// MetadataFromHeader reads MetadataHeader; absent is no metadata.
func MetadataFromHeader(h http.Header) (map[string]string, *Error) {
	vals := h.Values(MetadataHeader)
	switch len(vals) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, badRequest("header %s sent %d times: send one JSON object with every key", MetadataHeader, len(vals))
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(vals[0]), &m); err != nil || m == nil {
		return nil, badRequest(`header %s must be a JSON object of string values, like {"author":"ana"}: %.80q`, MetadataHeader, vals[0])
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// SetMetadataHeader puts m into h as MetadataHeader (nothing for none).
func SetMetadataHeader(h http.Header, m map[string]string) {
	if len(m) == 0 {
		return
	}
	b, _ := json.Marshal(m) // a map of strings always marshals
	h.Set(MetadataHeader, string(b))
}
