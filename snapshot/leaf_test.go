package snapshot

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// module is kvtop's module path; the repository root is one level up.
const module = "github.com/kvtop/kvtop"

// leaves are the kvtop packages snapshot may import: packages that import
// nothing of kvtop but other leaves. None so far.
var leaves = map[string]bool{}

// TestLeaf: package snapshot imports the standard library and leaves only,
// so that views, remote consoles, the API and scripts can read snapshots
// without the pool or the collectors (and nothing can make snapshot
// import them back).
func TestLeaf(t *testing.T) {
	seen := map[string]bool{}
	var walk func(pkg, dir string)
	walk = func(pkg, dir string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			first, _, _ := strings.Cut(imp, "/")
			switch {
			case !strings.Contains(first, "."):
				// the standard library
			case leaves[imp]:
				walk(imp, filepath.Join("..", filepath.FromSlash(strings.TrimPrefix(imp, module+"/"))))
			case imp == module || strings.HasPrefix(imp, module+"/"):
				t.Errorf("%s imports %s: snapshot must stay a leaf (move what it needs into snapshot, or make it a leaf)", pkg, imp)
			default:
				t.Errorf("%s imports %s: a leaf imports no other module", pkg, imp)
			}
		}
	}
	walk(module+"/snapshot", ".")
	if len(seen) == 0 {
		t.Fatal("nothing checked")
	}
}
