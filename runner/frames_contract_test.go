package runner

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// framesDoc is the protocol's written contract, beside this file.
const framesDoc = "FRAMES.md"

// contractBounds are the host's constants that FRAMES.md quotes as
// "`name` = value": each must be quoted, with its value.
var contractBounds = map[string]int64{
	"DefaultMaxFrame":  DefaultMaxFrame,
	"MaxPTYSide":       MaxPTYSide,
	"MaxCommandInput":  MaxCommandInput,
	"smallFrame":       smallFrame,
	"maxPythonLen":     maxPythonLen,
	"maxDisplayItems":  maxDisplayItems,
	"maxRichBytes":     maxRichBytes,
	"maxMIMEBytes":     maxMIMEBytes,
	"maxBundleEntries": maxBundleEntries,
	"maxJSONDepth":     maxJSONDepth,
	"maxChartJSON":     maxChartJSON,
	"maxClearOutputs":  maxClearOutputs,
	"maxErrorType":     maxErrorType,
	"maxErrorMessage":  maxErrorMessage,
	"maxTraceback":     maxTraceback,
	"maxFrames":        maxFrames,
	"maxFrameFile":     maxFrameFile,
	"maxFrameName":     maxFrameName,
	"maxFrameCode":     maxFrameCode,
	"maxMatchBytes":    maxMatchBytes,
	"MaxMatches":       MaxMatches,
	"MaxInspectBytes":  MaxInspectBytes,
	"maxIndent":        maxIndent,
	"maxJobName":       maxJobName,
	"maxCommandError":  maxCommandError,
}

// The kernel's limits FRAMES.md must quote, as module.NAME.
var contractKernelBounds = []string{"frames.MAX_FRAME", "kernel.RICH_BUDGET", "kernel.DISPLAY_LIMIT"}

type docFrame struct {
	T       frameType
	Dir     frameDir
	Answers []frameType
}

type docField struct {
	T                      frameType
	Dir                    frameDir
	Name, Type, Req, Bound string
	line                   int
}

type docBound struct {
	Name  string
	Value int64
	line  int
}

type framesContract struct {
	frames []docFrame
	fields []docField
	bounds []docBound
}

// parseFramesDoc reads the frame table, the field table and every quoted
// constant ("`name` = N", "N KiB" or "N MiB") of FRAMES.md.
func parseFramesDoc(t *testing.T, text string) framesContract {
	t.Helper()
	var c framesContract
	lines := strings.Split(text, "\n")
	boundRE := regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_.]*)` = (-?[0-9]+)( KiB| MiB)?")
	var header []string
	for i, l := range lines {
		for _, m := range boundRE.FindAllStringSubmatch(l, -1) {
			n, err := strconv.ParseInt(m[2], 10, 64)
			if err != nil {
				t.Fatalf("%s:%d: %s: %v", framesDoc, i+1, m[0], err)
			}
			switch m[3] {
			case " KiB":
				n <<= 10
			case " MiB":
				n <<= 20
			}
			c.bounds = append(c.bounds, docBound{m[1], n, i + 1})
		}
		if !strings.HasPrefix(l, "|") {
			header = nil
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		switch {
		case header == nil:
			header = cells
			continue
		case strings.HasPrefix(cells[0], "---"):
			continue
		}
		if len(cells) != len(header) {
			t.Fatalf("%s:%d: %d cells, the table has %d columns", framesDoc, i+1, len(cells), len(header))
		}
		name := func(s string) string { return strings.Trim(s, "`") }
		switch strings.Join(header, "|") {
		case "t|direction|sent|answered by":
			f := docFrame{T: frameType(name(cells[0])), Dir: frameDir(cells[1])}
			if cells[3] != "-" {
				for _, a := range strings.Split(cells[3], ",") {
					f.Answers = append(f.Answers, frameType(name(strings.TrimSpace(a))))
				}
			}
			c.frames = append(c.frames, f)
		case "frame|direction|field|JSON type|required|bound":
			c.fields = append(c.fields, docField{frameType(name(cells[0])), frameDir(cells[1]), name(cells[2]), cells[3], cells[4], cells[5], i + 1})
		default:
			t.Fatalf("%s:%d: a table with unknown columns %q", framesDoc, i+1, header)
		}
	}
	if len(c.frames) == 0 || len(c.fields) == 0 {
		t.Fatalf("%s: no frame table or no field table", framesDoc)
	}
	return c
}

// goFrames is what the host's source does with frame types.
type goFrames struct {
	consts  map[string]frameType // frame type constants, by name
	sent    map[frameType]bool   // set as a frame's "t"
	handled map[frameType]bool   // compared with or passed as a received type
	strs    map[string]bool      // string literals and json tags: field names
	errs    []string
}

// scanGoFrames type-checks the package's non-test files and finds every
// use of a frame type. A frame type may only be one of the frameType
// constants: a literal anywhere else (`"t": "x"`, `t == "x"`) is an error.
func scanGoFrames(t *testing.T) goFrames {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	constLits := map[ast.Expr]bool{} // the values of const declarations
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.CONST {
				for _, sp := range gd.Specs {
					for _, v := range sp.(*ast.ValueSpec).Values {
						constLits[v] = true
					}
				}
			}
		}
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("runner", fset, files, info)
	if err != nil {
		t.Fatalf("type-check runner: %v", err)
	}
	ftObj := pkg.Scope().Lookup("frameType")
	if ftObj == nil {
		t.Fatal("no type frameType")
	}
	ft := ftObj.Type()
	g := goFrames{consts: map[string]frameType{}, sent: map[frameType]bool{}, handled: map[frameType]bool{}, strs: map[string]bool{}}
	constObjs := map[types.Object]frameType{}
	for _, name := range pkg.Scope().Names() {
		if c, ok := pkg.Scope().Lookup(name).(*types.Const); ok && types.Identical(c.Type(), ft) {
			v, _ := strconv.Unquote(c.Val().ExactString())
			g.consts[name] = frameType(v)
			constObjs[c] = frameType(v)
		}
	}
	pos := func(n ast.Node) string { return fset.Position(n.Pos()).String() }
	// frameConst returns the frame type e names, if e is a frameType
	// constant by name.
	frameConst := func(e ast.Expr) (frameType, bool) {
		if id, ok := ast.Unparen(e).(*ast.Ident); ok {
			v, ok := constObjs[info.Uses[id]]
			return v, ok
		}
		return "", false
	}
	sentAt := map[ast.Expr]bool{}
	for _, f := range files {
		inProtocol := filepath.Base(fset.Position(f.Pos()).Filename) == "protocol.go"
		ast.Inspect(f, func(n ast.Node) bool {
			// A frameType value that is constant is one of the constants
			// by name, or the value of their own declaration.
			if e, ok := n.(ast.Expr); ok {
				tv, ok := info.Types[e]
				if _, named := frameConst(e); ok && tv.Value != nil && types.Identical(tv.Type, ft) && !named && !(inProtocol && constLits[e]) {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Value == `""` {
						// "": no type, what frameHead reports for an unknown one
					} else if _, paren := e.(*ast.ParenExpr); !paren {
						g.errs = append(g.errs, pos(e)+": a frame type must be a frameType constant of protocol.go, not a literal")
					}
				}
			}
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					if s, err := strconv.Unquote(n.Value); err == nil {
						g.strs[strings.Trim(s, `"`)] = true
					}
				}
			case *ast.Field:
				if n.Tag != nil {
					tag, _ := strconv.Unquote(n.Tag.Value)
					name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
					g.strs[name] = true
					if name == "t" && !types.Identical(info.Types[n.Type].Type, ft) {
						g.errs = append(g.errs, pos(n)+`: a field tagged json:"t" must be a frameType`)
					}
				}
			case *ast.CompositeLit:
				tv := info.Types[n]
				if tv.Type == nil {
					return true
				}
				var tval ast.Expr
				switch u := tv.Type.Underlying().(type) {
				case *types.Map:
					for _, el := range n.Elts {
						kv, ok := el.(*ast.KeyValueExpr)
						if lit, isLit := kv.Key.(*ast.BasicLit); ok && isLit && lit.Value == `"t"` {
							tval = kv.Value
						}
					}
				case *types.Struct:
					for i := 0; i < u.NumFields(); i++ {
						if name, _, _ := strings.Cut(reflect.StructTag(u.Tag(i)).Get("json"), ","); name != "t" {
							continue
						}
						for j, el := range n.Elts {
							if kv, ok := el.(*ast.KeyValueExpr); ok {
								if id, ok := kv.Key.(*ast.Ident); ok && id.Name == u.Field(i).Name() {
									tval = kv.Value
								}
							} else if j == i {
								tval = el
							}
						}
					}
				}
				if tval == nil {
					return true
				}
				if v, ok := frameConst(tval); ok {
					g.sent[v] = true
					sentAt[ast.Unparen(tval)] = true
				} else {
					g.errs = append(g.errs, pos(tval)+`: a frame's "t" must be a frameType constant of protocol.go`)
				}
			}
			return true
		})
	}
	// Every use of a constant outside protocol.go that does not set a
	// frame's "t" is the host handling a received frame of that type.
	for id, obj := range info.Uses {
		v, ok := constObjs[obj]
		if !ok || sentAt[id] || filepath.Base(fset.Position(id.Pos()).Filename) == "protocol.go" {
			continue
		}
		g.handled[v] = true
	}
	return g
}

// pyFrameScan reads the kernel's package (argv[1]) with ast and prints, as
// JSON: the frame types it sends (the "t" of every dict literal), those it
// dispatches on (every comparison of a "t": msg.get("t"), t, req.t), its
// module-level integer constants as module.NAME, every string constant (for
// field names) and what it cannot tell.
const pyFrameScan = `
import ast, json, os, sys
root = sys.argv[1]
out = {"sent": {}, "received": {}, "consts": {}, "strings": [], "bad": []}
strings = set()
def get_t(e):
    return (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "get"
            and len(e.args) >= 1 and isinstance(e.args[0], ast.Constant) and e.args[0].value == "t")
def t_names(tree):
    # Names and attributes assigned a frame's "t": t = msg.get("t"),
    # req.t, req.id = msg.get("t"), ...
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts))
            for tg, v in pairs:
                if get_t(v):
                    names.add(tg.id if isinstance(tg, ast.Name) else "." + tg.attr if isinstance(tg, ast.Attribute) else "")
    return names
def is_t(e, names):
    if get_t(e):
        return True
    if isinstance(e, ast.Name):
        return e.id in names
    return isinstance(e, ast.Attribute) and "." + e.attr in names
def const_int(e):
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return e.value
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        v = const_int(e.operand)
        return None if v is None else -v
    if isinstance(e, ast.BinOp):
        a, b = const_int(e.left), const_int(e.right)
        if a is None or b is None:
            return None
        ops = {ast.LShift: lambda: a << b, ast.Mult: lambda: a * b, ast.Add: lambda: a + b,
               ast.Sub: lambda: a - b, ast.FloorDiv: lambda: a // b}
        f = ops.get(type(e.op))
        return f() if f else None
    return None
for name in sorted(os.listdir(root)):
    if not name.endswith(".py"):
        continue
    mod = name[:-3]
    tree = ast.parse(open(os.path.join(root, name), encoding="utf-8").read(), name)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = const_int(node.value)
            if v is not None:
                out["consts"][mod + "." + node.targets[0].id] = v
    names = t_names(tree)
    for node in ast.walk(tree):
        where = "%s:%d" % (name, getattr(node, "lineno", 0))
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "t":
                    if isinstance(v, ast.Constant) and isinstance(v.value, str):
                        out["sent"].setdefault(v.value, where)
                    else:
                        out["bad"].append(where + ": a frame's \"t\" that is not a literal")
        elif isinstance(node, ast.Compare) and is_t(node.left, names):
            for op, c in zip(node.ops, node.comparators):
                vals = c.elts if isinstance(op, (ast.In, ast.NotIn)) and isinstance(c, (ast.Tuple, ast.List, ast.Set)) else [c]
                for v in vals:
                    if isinstance(v, ast.Constant) and isinstance(v.value, str):
                        out["received"].setdefault(v.value, where)
                    elif not (isinstance(v, ast.Constant) and v.value is None):
                        out["bad"].append(where + ": a frame type compared with something not a literal")
out["strings"] = sorted(strings)
json.dump(out, sys.stdout)
`

type pyFrames struct {
	Sent     map[string]string `json:"sent"`
	Received map[string]string `json:"received"`
	Consts   map[string]int64  `json:"consts"`
	Strings  []string          `json:"strings"`
	Bad      []string          `json:"bad"`
}

func scanPyFrames(t *testing.T, dir string) pyFrames {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("requires python3 on PATH to read the kernel's source: not found")
	}
	out, err := exec.Command("python3", "-c", pyFrameScan, dir).Output()
	if err != nil {
		t.Fatalf("scan the kernel's frames in %s: %v", dir, err)
	}
	var p pyFrames
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("scan the kernel's frames: %v\n%s", err, out)
	}
	return p
}

// checkFramesContract compares FRAMES.md (text) with the host's source in
// this directory and the kernel's in pyDir; it returns every disagreement.
func checkFramesContract(t *testing.T, text, pyDir string) []string {
	doc := parseFramesDoc(t, text)
	g := scanGoFrames(t)
	py := scanPyFrames(t, pyDir)
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	errs = append(errs, g.errs...)
	for _, b := range py.Bad {
		fail("kernel %s", b)
	}

	// The frame table is frameTypes, row for row.
	type key struct {
		T   frameType
		Dir frameDir
	}
	rows := map[key]docFrame{}
	for _, f := range doc.frames {
		if f.Dir != toKernel && f.Dir != toHost {
			fail("%s: %s: direction %q: allowed %s, %s", framesDoc, f.T, f.Dir, toKernel, toHost)
		}
		if _, dup := rows[key{f.T, f.Dir}]; dup {
			fail("%s: two rows for %s %s", framesDoc, f.T, f.Dir)
		}
		rows[key{f.T, f.Dir}] = f
	}
	specs := map[key]bool{}
	for _, s := range frameTypes {
		specs[key{s.T, s.Dir}] = true
		f, ok := rows[key{s.T, s.Dir}]
		switch {
		case !ok:
			fail("%s has no row for %s %s (frameTypes has it)", framesDoc, s.T, s.Dir)
		case !slices.Equal(f.Answers, s.Answers):
			fail("%s: %s is answered by %v; frameTypes says %v", framesDoc, s.T, f.Answers, s.Answers)
		}
	}
	for k := range rows {
		if !specs[k] {
			fail("%s has a row for %s %s that frameTypes does not", framesDoc, k.T, k.Dir)
		}
	}
	for _, f := range doc.frames {
		for _, a := range f.Answers {
			if _, ok := rows[key{a, toHost}]; !ok {
				fail("%s: %s is answered by %s, which has no kernel->host row", framesDoc, f.T, a)
			}
		}
	}

	// The host's source: every frameType constant is in frameTypes, every
	// host->kernel type is sent and nothing else, every kernel->host type
	// handled and nothing else.
	inSpec := map[frameType]bool{}
	for _, s := range frameTypes {
		inSpec[s.T] = true
	}
	for name, v := range g.consts {
		if !inSpec[v] {
			fail("constant %s = %q is not in frameTypes nor %s", name, v, framesDoc)
		}
	}
	for k := range rows {
		switch {
		case k.Dir == toKernel && !g.sent[k.T]:
			fail("%s: the host never sends %s", framesDoc, k.T)
		case k.Dir == toHost && !g.handled[k.T]:
			fail("%s: the host never handles %s", framesDoc, k.T)
		}
	}
	for v := range g.sent {
		if _, ok := rows[key{v, toKernel}]; !ok {
			fail("the host sends %s, which has no host->kernel row in %s", v, framesDoc)
		}
	}
	for v := range g.handled {
		if _, ok := rows[key{v, toHost}]; !ok {
			fail("the host handles %s, which has no kernel->host row in %s", v, framesDoc)
		}
	}

	// The kernel's source: what it sends and what it dispatches on.
	for v, where := range py.Sent {
		if _, ok := rows[key{frameType(v), toHost}]; !ok {
			fail("kernel %s sends %q, which has no kernel->host row in %s", where, v, framesDoc)
		}
	}
	for v, where := range py.Received {
		if _, ok := rows[key{frameType(v), toKernel}]; !ok {
			fail("kernel %s dispatches on %q, which has no host->kernel row in %s", where, v, framesDoc)
		}
	}
	for k := range rows {
		if _, ok := py.Sent[string(k.T)]; k.Dir == toHost && !ok {
			fail("%s: the kernel never sends %s", framesDoc, k.T)
		}
		if _, ok := py.Received[string(k.T)]; k.Dir == toKernel && !ok {
			fail("%s: the kernel never dispatches on %s", framesDoc, k.T)
		}
	}

	// Fields: each belongs to a row, and its name is spoken on both sides.
	pyStrs := map[string]bool{}
	for _, s := range py.Strings {
		pyStrs[s] = true
	}
	hasFields := map[key]bool{}
	jsonTypes := []string{"string", "integer", "number", "boolean", "object", "array"}
	for _, f := range doc.fields {
		if _, ok := rows[key{f.T, f.Dir}]; !ok {
			fail("%s:%d: field %s of %s %s, which has no frame row", framesDoc, f.line, f.Name, f.T, f.Dir)
		}
		hasFields[key{f.T, f.Dir}] = true
		if !slices.Contains(jsonTypes, f.Type) {
			fail("%s:%d: field %s: JSON type %q: allowed %v", framesDoc, f.line, f.Name, f.Type, jsonTypes)
		}
		if f.Req == "" {
			fail("%s:%d: field %s: required is empty", framesDoc, f.line, f.Name)
		}
		leaf := f.Name[strings.LastIndex(f.Name, ".")+1:]
		if !g.strs[leaf] {
			fail("%s:%d: field %s: the host's source never names %q", framesDoc, f.line, f.Name, leaf)
		}
		if !pyStrs[leaf] {
			fail("%s:%d: field %s: the kernel's source never names %q", framesDoc, f.line, f.Name, leaf)
		}
	}
	for k := range rows {
		if !hasFields[k] {
			fail("%s: %s %s has no fields rows", framesDoc, k.T, k.Dir)
		}
	}

	// Bounds: every quoted constant has its value in the code, and every
	// bound the host enforces is quoted.
	quoted := map[string]bool{}
	for _, b := range doc.bounds {
		quoted[b.Name] = true
		var want int64
		var ok bool
		if strings.Contains(b.Name, ".") {
			want, ok = py.Consts[b.Name]
		} else {
			want, ok = contractBounds[b.Name]
		}
		switch {
		case !ok:
			fail("%s:%d: %s: no such constant (Go: in contractBounds; kernel: module.NAME)", framesDoc, b.line, b.Name)
		case want != b.Value:
			fail("%s:%d: %s = %d, but the code has %d", framesDoc, b.line, b.Name, b.Value, want)
		}
	}
	for name := range contractBounds {
		if !quoted[name] {
			fail("%s never quotes the host's bound %s", framesDoc, name)
		}
	}
	for _, name := range contractKernelBounds {
		if !quoted[name] {
			fail("%s never quotes the kernel's bound %s", framesDoc, name)
		}
	}
	slices.Sort(errs)
	return errs
}

// TestFramesContract: FRAMES.md, the host's frameTypes and its uses, and
// the kernel's source agree on every frame type, its direction, what
// answers it, its fields' names and the bounds the file quotes.
func TestFramesContract(t *testing.T) {
	text, err := os.ReadFile(framesDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range checkFramesContract(t, string(text), "jailcell_kernel") {
		t.Error(e)
	}
}
