package api

import "testing"

// FuzzDecodeRequest feeds arbitrary lines to the request decoder. Its seeds
// are the table of TestDecodeRequest plus testdata/fuzz/FuzzDecodeRequest,
// which TestDecodeRequestSeeds also runs as plain unit tests.
func FuzzDecodeRequest(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add([]byte(tc.line))
	}
	for _, line := range e2bDecodeLines {
		f.Add([]byte(line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := DecodeRequest(line)
		checkDecodeInvariants(t, line, req, err)
	})
}
