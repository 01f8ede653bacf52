// Package kubernetes holds the fleet's Kubernetes manifests (docs/fleet.md)
// and the test that checks them without a cluster. The test must never
// need a cluster or apply the manifests anywhere.
package kubernetes
