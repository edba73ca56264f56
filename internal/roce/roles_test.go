package roce

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// TestRolesTakeNoQP holds the roles to their views: no method of the
// responder, the completer or the requester takes a *QP (they get a
// respQP, a compQP, a reqSent or a compResult instead; views.go).
func TestRolesTakeNoQP(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			recv, ok := star.X.(*ast.Ident)
			if !ok || (recv.Name != "responder" && recv.Name != "completer" && recv.Name != "requester") {
				continue
			}
			checked++
			for _, p := range fn.Type.Params.List {
				if s, ok := p.Type.(*ast.StarExpr); ok {
					if id, ok := s.X.(*ast.Ident); ok && id.Name == "QP" {
						t.Errorf("%s: (*%s).%s takes a *QP; give the role the view it needs (views.go)", fset.Position(fn.Pos()), recv.Name, fn.Name.Name)
					}
				}
			}
		}
	}
	if checked < 30 {
		t.Fatalf("checked only %d role methods: did the files move?", checked)
	}
}

// TestViewsCurrent: the views the QP keeps for its roles match the QP
// after it is created, connected and modified.
func TestViewsCurrent(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	check := func(when string) {
		t.Helper()
		for _, q := range []verbs.QP{f.rc, f.uc, f.ud} {
			qp := q.(*QP)
			qp.mu.Lock()
			fresh := views{resp: qp.respQP(), comp: qp.compQP()}
			same := qp.views == fresh
			qp.mu.Unlock()
			if !same {
				t.Errorf("%s: %v QP's views are stale:\n kept  %+v\n fresh %+v", when, qp.typ, qp.views, fresh)
			}
		}
	}
	check("after connecting")
	for _, q := range []verbs.QP{f.rc, f.uc} {
		if err := q.Modify(&verbs.QPAttr{QPAccessFlags: verbs.AccessRemoteRead, MinRNRTimer: 20, Timeout: 9, RetryCnt: 2, RNRRetry: 3},
			verbs.QPAttrAccessFlags|verbs.QPAttrMinRNRTimer|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry); err != nil {
			// UC takes fewer attributes in RTS: change what it takes.
			if err := q.Modify(&verbs.QPAttr{QPAccessFlags: verbs.AccessRemoteWrite}, verbs.QPAttrAccessFlags); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("after RTS → RTS")
	for _, q := range []verbs.QP{f.rc, f.uc, f.ud} {
		if err := q.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState); err != nil {
			t.Fatal(err)
		}
	}
	check("after RESET")
}
