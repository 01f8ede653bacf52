// Package openapi checks api/openapi.json with the tools a client
// developer points at it: Redocly's linter under its recommended rules
// (redocly.yaml beside this file), and openapi-typescript, whose generated
// types client.ts must compile against with tsc --strict. The tools are
// pinned by the committed package-lock.json and installed once by
// scripts/fetch-openapi-tools.sh. That the document is true to the server
// is api's TestOpenAPIRoutes, TestOpenAPIContract and TestOpenAPIStatuses.
// It must never write api/openapi.json: its altered documents are copies
// in temporary directories.
package openapi
