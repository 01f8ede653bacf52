// Package filesystem is the Go code protoc generates from filesystem.proto (make proto):
// the messages of envd's filesystem service, E2B's wire.
package filesystem
