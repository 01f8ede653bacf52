package kubernetes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/jailcell/jailcell/internal/testenv"
)

// TestMain removes the binary TestFleetWiring built.
func TestMain(m *testing.M) { testenv.Main(m) }

// doc is one parsed manifest with its node tree (for comments).
type doc struct {
	file string
	obj  map[string]any
	node *yaml.Node
}

func load(t *testing.T) []doc {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	sort.Strings(files)
	var docs []doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			var obj map[string]any
			if err := n.Decode(&obj); err != nil || obj == nil {
				t.Fatalf("%s document %d: not a mapping: %v", f, i+1, err)
			}
			docs = append(docs, doc{f, obj, &n})
		}
	}
	return docs
}

func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any, path ...string) string { s, _ := get(v, path...).(string); return s }

func list(v any, path ...string) []any { l, _ := get(v, path...).([]any); return l }

// find returns the mapping node under key of a mapping node.
func find(n *yaml.Node, key string) (k, v *yaml.Node) {
	if n.Kind == yaml.DocumentNode {
		n = n.Content[0]
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

func path(n *yaml.Node, keys ...string) (k, v *yaml.Node) {
	v = n
	for _, key := range keys {
		if v == nil {
			return nil, nil
		}
		k, v = find(v, key)
	}
	return k, v
}

// TestManifests: every manifest parses, has the fields its kind needs,
// its selectors match its pods, and the node's privileges and host mounts
// each carry the comment that explains them.
func TestManifests(t *testing.T) {
	docs := load(t)
	kinds := map[string]doc{}
	for _, d := range docs {
		kind, name := str(d.obj, "kind"), str(d.obj, "metadata", "name")
		if str(d.obj, "apiVersion") == "" || kind == "" || name == "" {
			t.Errorf("%s: apiVersion, kind and metadata.name are required: %v", d.file, d.obj)
			continue
		}
		if kind != "Namespace" && str(d.obj, "metadata", "namespace") != "jailcell" {
			t.Errorf("%s: %s %s not in namespace jailcell", d.file, kind, name)
		}
		kinds[kind+"/"+name] = d
	}
	for _, want := range []string{"Namespace/jailcell", "DaemonSet/jailcell-node", "Deployment/jailcell-haproxy", "Service/jailcell",
		"Secret/jailcell-store", "Secret/jailcell-store-key", "Secret/jailcell-tokens", "ConfigMap/jailcell-config", "ConfigMap/jailcell-fleet"} {
		if _, ok := kinds[want]; !ok {
			t.Errorf("no %s among the manifests", want)
		}
	}
	for _, key := range []string{"DaemonSet/jailcell-node", "Deployment/jailcell-haproxy"} {
		d, ok := kinds[key]
		if !ok {
			continue
		}
		sel := get(d.obj, "spec", "selector", "matchLabels").(map[string]any)
		labels, _ := get(d.obj, "spec", "template", "metadata", "labels").(map[string]any)
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s: selector %s=%v does not match the pod labels %v", key, k, v, labels)
			}
		}
		ctrs := list(d.obj, "spec", "template", "spec", "containers")
		if len(ctrs) == 0 {
			t.Fatalf("%s: no containers", key)
		}
		for _, c := range ctrs {
			if str(c, "name") == "" || str(c, "image") == "" {
				t.Errorf("%s: a container without name or image: %v", key, c)
			}
		}
	}
	if svc, ok := kinds["Service/jailcell"]; ok {
		if get(svc.obj, "spec", "selector", "app") != "jailcell-haproxy" {
			t.Errorf("Service jailcell does not select the HAProxy pods: %v", get(svc.obj, "spec", "selector"))
		}
	}
	ds := kinds["DaemonSet/jailcell-node"]
	if ds.node == nil {
		return
	}
	// The grants that need explaining: privileged, the seccomp profile,
	// host networking, and every hostPath mount.
	_, podSpec := path(ds.node, "spec", "template", "spec")
	for _, k := range []string{"hostNetwork"} {
		if kn, _ := path(podSpec, k); kn == nil || kn.HeadComment == "" {
			t.Errorf("daemonset: %s has no comment saying why", k)
		}
	}
	_, ctrs := path(podSpec, "containers")
	c := ctrs.Content[0]
	for _, p := range [][]string{{"securityContext", "privileged"}, {"securityContext", "seccompProfile"}} {
		if kn, _ := path(c, p...); kn == nil || kn.HeadComment == "" {
			t.Errorf("daemonset: %s has no comment saying why", strings.Join(p, "."))
		}
	}
	hostPaths := map[string]bool{}
	for _, v := range list(ds.obj, "spec", "template", "spec", "volumes") {
		if get(v, "hostPath") != nil {
			hostPaths[str(v, "name")] = true
		}
	}
	_, mounts := path(c, "volumeMounts")
	explained := map[string]bool{}
	for _, m := range mounts.Content {
		_, name := find(m, "name")
		if hostPaths[name.Value] {
			if m.HeadComment == "" && m.Content[0].HeadComment == "" {
				t.Errorf("daemonset: host mount %s has no comment saying why", name.Value)
			}
			explained[name.Value] = true
		}
	}
	for hp := range hostPaths {
		if !explained[hp] {
			t.Errorf("daemonset: hostPath volume %s is not mounted", hp)
		}
	}
}

// TestFleetWiring: the node configuration is YAML with a TCP listener and
// its tokens; the store credentials are the Secret's, not the config's;
// every address configs/haproxy.cfg reads from the environment is in the
// ConfigMap the HAProxy pods take their environment from.
func TestFleetWiring(t *testing.T) {
	docs := load(t)
	by := map[string]map[string]any{}
	for _, d := range docs {
		by[str(d.obj, "kind")+"/"+str(d.obj, "metadata", "name")] = d.obj
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(str(by["ConfigMap/jailcell-config"], "data", "config.yaml")), &cfg); err != nil || cfg == nil {
		t.Fatalf("config.yaml of jailcell-config: %v", err)
	}
	if !strings.HasPrefix(str(cfg, "listen"), "tcp://") || str(cfg, "auth", "tokens_file") == "" {
		t.Errorf("node config: want listen tcp://... and auth.tokens_file, got %v", cfg)
	}
	raw := str(by["ConfigMap/jailcell-config"], "data", "config.yaml")
	// The real loader takes it: every key known, every value in range.
	f := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(f, []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Jailcell(t), "config", "--config", f)
	cmd.Env = testenv.ChildEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("jailcell config refuses the ConfigMap's config.yaml: %v\n%s", err, out)
	}
	if regexp.MustCompile(`(?i)secret|access_key`).MatchString(raw) {
		t.Errorf("node config mentions credentials; they belong in the Secret")
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if get(by["Secret/jailcell-store"], "stringData", k) == nil {
			t.Errorf("Secret jailcell-store lacks %s", k)
		}
	}
	// Store attack: the shared store is signed with a fleet key that comes
	// from its own Secret, mounted where store.key_file points, 0400.
	kf := str(cfg, "store", "key_file")
	if kf == "" {
		t.Errorf("node config: a shared store without store.key_file is refused; got %v", cfg["store"])
	}
	if k := str(by["Secret/jailcell-store-key"], "stringData", filepath.Base(kf)); !regexp.MustCompile(`(?m)^\s*[A-Za-z0-9][A-Za-z0-9._-]* \S+`).MatchString(k) {
		t.Errorf("Secret jailcell-store-key lacks %s as NAME KEY lines: %q", filepath.Base(kf), k)
	}
	if get(by["Secret/jailcell-store"], "stringData", filepath.Base(kf)) != nil {
		t.Errorf("the fleet key is in Secret jailcell-store with the S3 credentials: anyone with those could sign")
	}
	mounted := false
	for _, c := range list(by["DaemonSet/jailcell-node"], "spec", "template", "spec", "containers") {
		for _, vm := range list(c, "volumeMounts") {
			if str(vm, "mountPath") == filepath.Dir(kf) && str(vm, "name") == "store-key" {
				mounted = true
			}
		}
	}
	for _, vm := range list(by["DaemonSet/jailcell-node"], "spec", "template", "spec", "volumes") {
		if str(vm, "name") == "store-key" && (str(vm, "secret", "secretName") != "jailcell-store-key" || fmt.Sprint(get(vm, "secret", "defaultMode")) != "256") {
			t.Errorf("volume store-key: want Secret jailcell-store-key, defaultMode 0400: %v", vm)
		}
	}
	if !mounted {
		t.Errorf("DaemonSet does not mount volume store-key at %s (store.key_file's directory)", filepath.Dir(kf))
	}
	hcfg, err := os.ReadFile(filepath.Join("..", "..", "configs", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	fleetEnv, _ := get(by["ConfigMap/jailcell-fleet"], "data").(map[string]any)
	for _, m := range regexp.MustCompile(`(?m)^[^#\n]*"\$\{(\w+)\}"`).FindAllStringSubmatch(string(hcfg), -1) {
		if _, ok := fleetEnv[m[1]]; !ok {
			t.Errorf("configs/haproxy.cfg reads %s, which ConfigMap jailcell-fleet does not set", m[1])
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*server (\w+) "\$\{JC_NODE_(\w+)\}"`).FindAllStringSubmatch(string(hcfg), -1) {
		if strings.ToUpper(m[1]) != m[2] {
			t.Errorf("haproxy.cfg server %s takes JC_NODE_%s: the variable must be its node.id", m[1], m[2])
		}
	}
}
