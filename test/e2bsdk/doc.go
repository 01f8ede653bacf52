// Package e2bsdk runs E2B's stock JS SDKs (npm e2b 2.51.0 and
// @e2b/code-interpreter 2.8.0, unchanged, pinned by js/package-lock.json
// and installed once by scripts/fetch-e2b-sdk.sh) against a real
// `jailcell serve` with its E2B door, with only E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY set, as a program written for E2B's
// cloud would run here. The tests are node's own test runner files in js/;
// each runs in its own node process, all at once.
package e2bsdk
