// Package docs holds checks on the repository's documentation.
package docs
