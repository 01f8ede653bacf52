// Package kubernetes holds the fleet's Kubernetes manifests (docs/fleet.md)
// and the test that checks them without a cluster.
package kubernetes
