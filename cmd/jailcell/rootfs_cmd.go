package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	units "github.com/docker/go-units"
	"github.com/spf13/cobra"

	"github.com/jailcell/jailcell/rootfs"
)

// newRootfsCmd is `jailcell rootfs`: build-time sealing and the day-to-day
// checks and transport of the read-only Python rootfs.
func newRootfsCmd() *cobra.Command {
	var base string
	cmd := &cobra.Command{
		Use:   "rootfs",
		Short: "Manage the read-only Python rootfs that sandboxes run on",
		Long: "Manage the read-only Python rootfs that sandboxes run on.\n\n" +
			"Build it with `make rootfs` (runtime/build-rootfs.sh; the default profile, or\n" +
			"`make rootfs ROOTFS_PROFILE=minimal` into /var/lib/jailcell/rootfs-minimal);\n" +
			"move it to a machine without network access with\n" +
			"`jailcell rootfs export | jailcell rootfs import -`.",
	}
	cmd.PersistentFlags().StringVar(&base, "base", rootfs.DefaultBase,
		"rootfs base directory, holding <version>/ directories and the current symlink")
	cmd.AddCommand(
		newRootfsSealCmd(),
		newRootfsVerifyCmd(&base),
		newRootfsExportCmd(&base),
		newRootfsImportCmd(&base),
		newRootfsInfoCmd(&base),
	)
	return cmd
}

func newRootfsSealCmd() *cobra.Command {
	var profile rootfs.Profile
	cmd := &cobra.Command{
		Use:   "seal [--profile NAME --profile-packages P1,P2,...] DIR",
		Short: "Hash a freshly built version directory and write its manifest.json",
		Long: "Hash DIR/root and write DIR/manifest.json, recording the installed packages\n" +
			"(from the tree's dpkg database), the Python version and the build profile with\n" +
			"the packages it asked for (each must be installed). The build script runs\n" +
			"this as its last step; nothing in the tree is executed.",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			start := time.Now()
			py, pkgs, err := rootfs.Inspect(filepath.Join(args[0], "root"))
			if err != nil {
				return err
			}
			m, err := rootfs.Seal(args[0], pkgs, py, profile)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sealed rootfs %s: profile %s, python %s, %d packages, %d files, %s, %s (%.1fs)\n",
				m.Version, profileName(m.Profile), m.PythonVersion, len(m.Packages), m.Files, sizeMB(m.SizeBytes),
				m.ContentHash, time.Since(start).Seconds())
			return nil
		},
	}
	cmd.Flags().StringVar(&profile.Name, "profile", "", "the build profile's name (default, minimal)")
	cmd.Flags().StringSliceVar(&profile.Packages, "profile-packages", nil,
		"the packages the profile asked for, comma-separated; each must be installed in the tree")
	return cmd
}

func newRootfsVerifyCmd(base *string) *cobra.Command {
	return &cobra.Command{
		Use:   "verify [DIR]",
		Short: "Recompute the rootfs content hash and compare it with the manifest",
		Long: "Recompute the content hash of the rootfs at DIR (a base, version or root\n" +
			"directory; default the --base's current version) and compare it with its manifest.",
		Args:         cobra.MaximumNArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			path := *base
			if len(args) == 1 {
				path = args[0]
			}
			r, err := rootfs.Open(path)
			if err != nil {
				return err
			}
			start := time.Now()
			if err := r.Verify(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rootfs %s ok: %s, %d files, %s (verified in %.1fs)\n",
				r.Manifest.Version, r.Manifest.ContentHash, r.Manifest.Files,
				humanBytes(r.Manifest.SizeBytes), time.Since(start).Seconds())
			return nil
		},
	}
}

func newRootfsExportCmd(base *string) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:          "export [--out FILE|-]",
		Short:        "Write the current rootfs as a gzip tarball",
		Long:         "Write the current rootfs (manifest and tree) as a gzip tarball to FILE or, with -, to standard output.",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := rootfs.Open(*base)
			if err != nil {
				return err
			}
			start := time.Now()
			if out == "-" {
				if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
					return errors.New("export rootfs: refusing to write a tarball to a terminal: use --out FILE or redirect")
				}
				w := bufio.NewWriterSize(os.Stdout, 1<<20)
				if err := rootfs.Export(r, w); err != nil {
					return err
				}
				return w.Flush()
			}
			size, err := exportToFile(r, out)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "exported rootfs %s to %s (%s, %.1fs)\n",
				r.Manifest.Version, out, humanBytes(size), time.Since(start).Seconds())
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "-", "output file, or - for standard output")
	return cmd
}

// exportToFile writes beside out and renames, so a failed export leaves no
// truncated tarball under the final name.
func exportToFile(r *rootfs.Rootfs, out string) (int64, error) {
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return 0, fmt.Errorf("export rootfs to %s: %w", out, err)
	}
	defer os.Remove(f.Name())
	w := bufio.NewWriterSize(f, 1<<20)
	err = rootfs.Export(r, w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), out)
	}
	if err != nil {
		return 0, fmt.Errorf("export rootfs to %s: %w", out, err)
	}
	fi, err := os.Stat(out)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func newRootfsImportCmd(base *string) *cobra.Command {
	return &cobra.Command{
		Use:   "import FILE|-",
		Short: "Install a rootfs tarball made by export and make it current",
		Long: "Extract a tarball made by `jailcell rootfs export` (from FILE, or standard input\n" +
			"with -) into the --base directory, verify it against its manifest's content hash,\n" +
			"and point current at it. A version already present is not extracted again.",
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			var in io.Reader = os.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return fmt.Errorf("import rootfs: %w", err)
				}
				defer f.Close()
				in = f
			}
			start := time.Now()
			r, err := rootfs.Import(bufio.NewReaderSize(in, 1<<20), *base)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rootfs %s is current at %s (%.1fs)\n",
				r.Manifest.Version, r.Dir, time.Since(start).Seconds())
			return nil
		},
	}
}

func newRootfsInfoCmd(base *string) *cobra.Command {
	var asJSON, all bool
	cmd := &cobra.Command{
		Use:          "info",
		Short:        "Show the current rootfs: its profile, the profile's packages and versions, its size",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := rootfs.Open(*base)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(r.Manifest)
			}
			writeRootfsInfo(w, r, all)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole manifest as JSON")
	cmd.Flags().BoolVar(&all, "all", false, "list every installed package, not only the profile's")
	return cmd
}

// legacyProfilePackages is what a rootfs sealed before profiles asked for
// (today's minimal profile), listed for such a rootfs.
var legacyProfilePackages = []string{"python3", "python3-numpy", "python3-pandas", "python3-matplotlib",
	"python3-openpyxl", "python3-pip", "python3-ipython"}

// writeRootfsInfo prints a manifest for people: the profile's packages
// with their installed versions, or with all, every package.
func writeRootfsInfo(w io.Writer, r *rootfs.Rootfs, all bool) {
	m := r.Manifest
	fmt.Fprintf(w, "version:  %s\n", m.Version)
	fmt.Fprintf(w, "profile:  %s\n", profileName(m.Profile))
	fmt.Fprintf(w, "dir:      %s\n", r.Dir)
	fmt.Fprintf(w, "built:    %s\n", m.BuiltAt.Format(time.RFC3339))
	fmt.Fprintf(w, "python:   %s\n", m.PythonVersion)
	fmt.Fprintf(w, "size:     %s in %d files\n", sizeMB(m.SizeBytes), m.Files)
	fmt.Fprintf(w, "hash:     %s\n", m.ContentHash)
	versions := make(map[string]string, len(m.Packages))
	for _, p := range m.Packages {
		versions[p.Name] = p.Version
	}
	if all {
		fmt.Fprintf(w, "packages: %d installed\n", len(m.Packages))
		for _, p := range m.Packages {
			fmt.Fprintf(w, "  %-32s %s\n", p.Name, p.Version)
		}
		return
	}
	asked := m.ProfilePackages
	if len(asked) == 0 {
		asked = legacyProfilePackages
	}
	fmt.Fprintf(w, "packages: %d installed, %d asked for by the profile (--all lists every one)\n",
		len(m.Packages), len(asked))
	for _, name := range asked {
		v, ok := versions[name]
		if !ok {
			v = "(not installed)"
		}
		fmt.Fprintf(w, "  %-32s %s\n", name, v)
	}
}

// profileName shows a manifest's profile; rootfs sealed before profiles
// carry none and hold what is now the minimal set.
func profileName(p string) string {
	if p == "" {
		return "none (sealed before profiles; the minimal set)"
	}
	return p
}

// sizeMB shows a size in decimal megabytes (10^6) beside the binary form.
func sizeMB(n int64) string {
	return fmt.Sprintf("%.0f MB (%s)", float64(n)/1e6, humanBytes(n))
}

// humanBytes formats a byte count in binary units ("1.465GiB"), the same
// way the config prints sizes (go-units).
func humanBytes(n int64) string { return units.BytesSize(float64(n)) }
