// Package secretfile reads files that hold credentials (bearer tokens,
// the fleet's store key). Such a file is refused, never used, unless it is
// a regular file (not followed through a symlink) owned by this process's
// user that no other user can change, and others cannot read: whoever
// could replace it could admit themselves or forge what it authenticates.
// It must never log or echo a file's content.
package secretfile
