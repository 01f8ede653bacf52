// Package conformance runs notebooks cell by cell in a jailcell session and
// in a real Jupyter kernel, and compares what each cell produced. Besides its
// tests it holds only the comparison (compare.go), which test/jupyter
// shares. The Jupyter side runs code on the host without a sandbox, so
// this package must never run notebooks other than its own trusted corpus
// (testdata/notebooks).
package conformance
