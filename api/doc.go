// Package api owns jailcell's wire protocol: the request, response and event
// types, the one Dispatcher every transport calls, and the JSON-lines
// transport. Transports only decode, call Dispatcher.Handle and encode; all
// validation lives in DecodeRequest and Request.Validate so no transport can
// skip it. api must never touch a sandbox or a session's files itself: it
// goes through session.Manager, which owns confinement.
package api
