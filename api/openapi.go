package api

import _ "embed"

// openapiDoc is the OpenAPI 3.1 document of the HTTP API, whose component
// schemas the JSON-lines transport shares (its "x-jsonl" maps each op to
// its response schema). TestOpenAPIRoutes fails when a served route is
// missing from it or a documented one is not served; TestOpenAPIContract
// validates real responses of both transports against it.
//
//go:embed openapi.json
var openapiDoc []byte

// OpenAPI returns the API's OpenAPI 3.1 document, served at
// GET /v1/openapi.json. The caller must not modify it.
func OpenAPI() []byte { return openapiDoc }
