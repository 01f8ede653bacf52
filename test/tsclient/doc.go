// Package tsclient tests the TypeScript client (client/typescript) the way
// a user gets it: built with the pinned typescript (tsc --strict, .js and
// .d.ts), its wire types compiled against the types openapi-typescript
// generates from api/openapi.json, then its tests run by node's own test
// runner against a real `jailcell serve` (its Unix socket, and its TCP
// listener with a bearer token) and real `jailcell json` processes. The
// tools are pinned by client/typescript's committed package-lock.json and
// installed once by scripts/fetch-tsclient-tools.sh. It must never write
// into client/typescript: it builds a staged copy.
package tsclient
