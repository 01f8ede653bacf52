// Package filesystemconnect is the Connect handler and client code protoc
// generates from ../filesystem.proto (make proto) for envd's filesystem service.
package filesystemconnect
