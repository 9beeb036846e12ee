package cohort_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// flagFuncs register a flag with a usage text (package flag's, and the
// torchrun-style helpers of cmd/cohort).
var flagFuncs = map[string]bool{"StringVar": true, "IntVar": true, "Int64Var": true, "UintVar": true, "Uint64Var": true,
	"Float64Var": true, "BoolVar": true, "DurationVar": true, "TextVar": true, "Var": true, "String": true, "Int": true,
	"Int64": true, "Uint": true, "Uint64": true, "Float64": true, "Bool": true, "Duration": true, "Func": true, "BoolFunc": true,
	"strFlag": true, "intFlag": true}

// TestFlagUsageHasNoBackquotes: package flag takes a `quoted` word in a
// usage text as the flag's argument name, so "Opticks from `go env
// GOROOT`" showed in -help as "-data go env GOROOT". No flag of a
// program in the repository has a backquote in its usage.
func TestFlagUsageHasNoBackquotes(t *testing.T) {
	fset := token.NewFileSet()
	for _, root := range []string{"cmd", "examples"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				var name string
				switch fn := call.Fun.(type) {
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				case *ast.Ident:
					name = fn.Name
				}
				if !flagFuncs[name] || len(call.Args) == 0 {
					return true
				}
				// The usage is the last argument; a concatenation counts whole.
				var text strings.Builder
				ast.Inspect(call.Args[len(call.Args)-1], func(n ast.Node) bool {
					if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						text.WriteString(s)
					}
					return true
				})
				if strings.Contains(text.String(), "`") {
					t.Errorf("%s: flag usage %q has a backquote: -help shows the quoted words as the flag's argument name", fset.Position(call.Pos()), text.String())
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
