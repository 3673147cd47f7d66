// SPDX-License-Identifier: MIT

package rpal

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// packageFiles parses the package's non-test sources, every system's.
func packageFiles(t *testing.T, mode parser.Mode) (*token.FileSet, []*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, mode)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// packageDoc is the package's documentation as go doc shows it.
func packageDoc(t *testing.T) *doc.Package {
	t.Helper()
	fset, files := packageFiles(t, parser.ParseComments)
	p, err := doc.NewFromFiles(fset, files, "rpal.dev/rpal")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGodocNamesNoUnexported checks that the documentation go doc shows
// names nothing a user cannot see: an unexported constant, type or
// function named there leaves the reader without its value or meaning.
func TestGodocNamesNoUnexported(t *testing.T) {
	p := packageDoc(t)
	// Every package-level name, exported or not: go doc drops the
	// unexported ones, so they are collected from the syntax.
	_, files := packageFiles(t, 0)
	hidden := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && !d.Name.IsExported() {
					hidden[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							hidden[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if !n.IsExported() && n.Name != "_" {
								hidden[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	var docs []struct{ where, text string }
	add := func(where, text string) { docs = append(docs, struct{ where, text string }{where, text}) }
	add("package", p.Doc)
	for _, c := range p.Consts {
		add("const "+strings.Join(c.Names, ","), c.Doc)
	}
	for _, v := range p.Vars {
		add("var "+strings.Join(v.Names, ","), v.Doc)
	}
	for _, f := range p.Funcs {
		add(f.Name, f.Doc)
	}
	for _, ty := range p.Types {
		add(ty.Name, ty.Doc)
		for _, c := range ty.Consts {
			add("const "+strings.Join(c.Names, ","), c.Doc)
			// Comments on the constants themselves, which go doc shows.
			for _, s := range c.Decl.Specs {
				if vs := s.(*ast.ValueSpec); vs.Doc != nil {
					add("const "+vs.Names[0].Name, vs.Doc.Text())
				}
			}
		}
		for _, f := range ty.Funcs {
			add(f.Name, f.Doc)
		}
		for _, m := range ty.Methods {
			add(ty.Name+"."+m.Name, m.Doc)
		}
	}
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	for _, d := range docs {
		for _, w := range word.FindAllString(d.text, -1) {
			// Names that are also English words ("process", "handshake")
			// are read as words; a camelCase name, or one the text points
			// to with "see", is read as the identifier.
			camel := strings.ToLower(w) != w
			if hidden[w] && (camel || strings.Contains(d.text, "see "+w)) {
				t.Errorf("%s: its documentation names the unexported %s", d.where, w)
			}
		}
	}
}

// TestGodocGivesListenerBounds checks that the values the documentation
// gives for the listener's bounds and a server Stream's request gap are
// those of the code.
func TestGodocGivesListenerBounds(t *testing.T) {
	p := packageDoc(t)
	text := map[string]string{}
	for _, ty := range p.Types {
		text[ty.Name] = strings.Join(strings.Fields(ty.Doc), " ")
	}
	for _, want := range []struct{ typ, phrase string }{
		{"Listener", fmt.Sprintf("at most %d handshakes", maxHandshakes)},
		{"Listener", fmt.Sprintf("at most %d connections wait for Accept", maxReady)},
		{"Stream", fmt.Sprintf("beyond %d µs", requestGap/time.Microsecond)},
	} {
		if !strings.Contains(text[want.typ], want.phrase) {
			t.Errorf("%s's documentation does not say %q", want.typ, want.phrase)
		}
	}
}
