// Package confined is the host's one rule for a path that comes from
// outside (a client's request, a file list from a sandbox) and its one way
// of opening such a path below a directory it does not trust.
//
// The rule: a path is accepted only if it is already a clean relative
// path: names separated by single "/", none of them empty, "." or "..",
// no NUL, at most MaxPathBytes. Anything else is refused, naming what was
// wrong; nothing is normalised. Resolving ".." lexically would make the
// name the host checks differ from the name the caller sent (and from
// what the kernel would resolve after a symlink), and a path that is
// refused rather than rewritten is logged, stored, diffed and reported as
// the very name that was checked. A caller that sends "a/../b" means a
// file in the directory or is probing; either way it can send "b".
//
// The open: a directory the caller can write may hold a symlink (a path
// join would follow it onto a host file: Judge0 CVE-2024-28185), a FIFO
// (opening one blocks until a peer opens the other end), a socket or a
// device, and may swap any of them with a directory while the host walks
// (the docker cp symlink-exchange race, CVE-2018-15664). So a path is
// resolved one component at a time, descriptor-relative from a directory
// the caller cannot replace: each component is opened O_PATH|O_NOFOLLOW,
// which opens nothing for I/O, and its type checked with fstat; only a
// directory is descended into and only a regular file is reopened for
// I/O, with O_NONBLOCK and O_NOFOLLOW, and checked again with fstat on the
// descriptor in hand. This package never follows a symlink, never opens a
// FIFO, socket or device, and never chowns or chmods by path.
package confined
