// Package docs holds checks on the repository's documentation: its links
// resolve and its map of the top-level folders matches the tree. It only
// reads the checkout and must never change it or need the network.
package docs
