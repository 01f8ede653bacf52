// Package rootfs manages the prebuilt, read-only Python root filesystem that
// every sandbox uses as the lower layer of its overlay: where it lives, the
// manifest that seals it, verifying it, and moving it between machines.
//
// On disk a base directory (DefaultBase) holds one directory per version:
//
//	<base>/<version>/root/          the tree
//	<base>/<version>/manifest.json  written last, beside the tree
//	<base>/current -> <version>     relative symlink, repointed atomically
//
// A base holds one build profile (runtime/build-rootfs.sh: "default" with
// the data-science stack, "minimal"); the manifest records the profile and
// the packages it asked for, and a host picks a profile by the base it
// opens.
//
// The tree is shared by every sandbox, so this package never writes into a
// sealed tree and never executes anything from one (Inspect reads the dpkg
// database and symlinks instead of running the tree's python3). Import treats
// its archive as hostile.
package rootfs
