package session

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeWheel builds a minimal pure-Python wheel by hand, as a wheelhouse on
// an air-gapped host would hold.
func writeWheel(t *testing.T, dir, name, version, body string) {
	t.Helper()
	files := map[string]string{
		name + "/__init__.py": body,
		fmt.Sprintf("%s-%s.dist-info/METADATA", name, version): fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version),
		fmt.Sprintf("%s-%s.dist-info/WHEEL", name, version):    "Wheel-Version: 1.0\nGenerator: jailcell-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-py3-none-any.whl", name, version)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z := zip.NewWriter(f)
	var record strings.Builder
	for p, c := range files {
		w, _ := z.Create(p)
		w.Write([]byte(c))
		sum := sha256.Sum256([]byte(c))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", p, base64.RawURLEncoding.EncodeToString(sum[:]), len(c))
	}
	recPath := fmt.Sprintf("%s-%s.dist-info/RECORD", name, version)
	fmt.Fprintf(&record, "%s,,\n", recPath)
	w, _ := z.Create(recPath)
	w.Write([]byte(record.String()))
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPackagesFromWheelhousePersist(t *testing.T) {
	wh := t.TempDir()
	if err := os.Chmod(wh, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(wh), 0o711)
	writeWheel(t, wh, "jcdemo", "1.0", "VALUE = 42\n")
	writeWheel(t, wh, "jclater", "2.0", "NAME = 'later'\n")
	writeWheel(t, wh, "jcmagic", "3.0", "MAGIC = 'pip magic'\n")
	writeWheel(t, wh, "jcbang", "4.0", "BANG = 'shell escape'\n")
	e := newEnv(t, func(c *Config) { c.Wheelhouse = wh })

	info, err := e.m.Create(context.Background(), CreateOptions{Requirements: []string{"jcdemo==1.0"}})
	if err != nil {
		t.Fatalf("create with requirements: %v", err)
	}
	if len(info.Installed) != 1 {
		t.Fatalf("installed = %v", info.Installed)
	}
	res := e.exec(t, info.ID, "import jcdemo\nprint(jcdemo.VALUE)", 0)
	if res.Stdout != "42\n" {
		t.Fatalf("requirement not importable: %+v", res)
	}
	// pip inside a cell installs into the session, offline, and it stays.
	res = e.exec(t, info.ID, "import subprocess, sys\nr = subprocess.run([sys.executable, '-m', 'pip', 'install', 'jclater'], capture_output=True, text=True)\nprint(r.returncode)", 120*time.Second)
	if res.Stdout != "0\n" {
		t.Fatalf("pip install in cell: %+v", res)
	}
	res = e.exec(t, info.ID, "import jclater\nprint(jclater.NAME)", 0)
	if res.Stdout != "later\n" {
		t.Fatalf("installed package did not persist: %+v", res)
	}

	// Notebook style: %pip and !pip install from the wheelhouse too, and the
	// packages stay.
	for _, c := range []struct{ install, check, want string }{
		{"%pip install jcmagic", "import jcmagic\nprint(jcmagic.MAGIC)", "pip magic\n"},
		{"!pip install jcbang", "import jcbang\nprint(jcbang.BANG)", "shell escape\n"},
	} {
		if res := e.exec(t, info.ID, c.install, 120*time.Second); res.Status != StatusOK {
			t.Fatalf("%s: %+v", c.install, res)
		}
		if res := e.exec(t, info.ID, c.check, 0); res.Stdout != c.want {
			t.Fatalf("after %s: %+v", c.install, res)
		}
	}

	_, err = e.m.Create(context.Background(), CreateOptions{Requirements: []string{"nosuchpkg==9"}})
	if err == nil || !strings.Contains(err.Error(), "nosuchpkg") {
		t.Fatalf("missing requirement: %v, want an error naming it", err)
	}
}
