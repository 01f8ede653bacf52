// Package e2b is the door that speaks E2B's protocol, so that programs
// written for E2B's stock SDKs (npm e2b, @e2b/code-interpreter, the Python
// SDKs) run on jailcell with only E2B_API_URL, E2B_SANDBOX_URL (or
// E2B_DOMAIN) and E2B_API_KEY set.
//
// One listener carries three services, told apart as E2B's proxy does:
// a request with the E2b-Sandbox-Id and E2b-Sandbox-Port headers, or to a
// PORT-ID.DOMAIN host, goes to that sandbox's envd (49983: the process and
// filesystem Connect services, /files, /envs, /health) or code
// interpreter (49999: /execute, /contexts); any other request is the
// control plane (/sandboxes...). A sandbox is a jailcell session; every
// call becomes one or more wire requests to the dispatcher (api.Handler),
// as every other door's do. docs/e2b.md is the contract: what each route
// maps to, and what it refuses and why.
//
// Trust: the control plane admits an X-API-KEY from the node's tokens
// file, which maps it to an owner, as a bearer token does on the TCP
// listener. Sandbox traffic carries the sandbox's access token, an HMAC
// of the owner and sandbox id under the node's secret, which create and
// connect hand out; so a token names its owner, one sandbox's token opens
// no other, and tokens survive a restart of the service without a table.
package e2b
