// Package processconnect is the Connect handler and client code protoc
// generates from ../process.proto (make proto) for envd's process service.
package processconnect
