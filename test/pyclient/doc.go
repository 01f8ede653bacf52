// Package pyclient tests the Python client (client/python) the way a user
// gets it: installed with pip, offline, from a copy of the package into a
// fresh venv, then driven against a real `jailcell serve` and real
// `jailcell json` processes, as root and as a user who is not root; the
// quickstarts in examples/quickstarts run against it too. It holds tests
// only, and must never write into client/python (its builds run on
// copies) or fetch anything from a package index.
package pyclient
