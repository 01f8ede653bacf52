// Package process is the Go code protoc generates from process.proto (make proto):
// the messages of envd's process service, E2B's wire.
package process
