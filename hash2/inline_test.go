package hash2

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// TestInlining checks the compiler's inlining decisions that the lookup
// path's cost rests on, the way net/netip does for its own: it builds the
// package and the address type's with -gcflags=-m and requires that each
// function below is reported inlinable. A change that makes one too
// costly to inline fails here rather than as a slower benchmark.
func TestInlining(t *testing.T) {
	want := []string{
		// The address hash of every two-phase lookup, and of the
		// growing storage's index keys (package lookup).
		"xxh64x16",
		"round",
		// A two-phase lookup's read of its exact slot's summary, and the
		// check at its early stop.
		"(*Table).Summary",
		"Summary.MayHold",
		"Summary.Distinct",
		"(*Table).Unchanged",
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no go command to check inlining with: %v", err)
		}
		t.Skipf("no go command to check inlining with: %v", err)
	}
	out, err := exec.Command(goTool, "build", "-gcflags=-m", ".", "../lookup").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	re := regexp.MustCompile(`(?m): can inline (\S+)$`)
	got := map[string]bool{}
	for _, m := range re.FindAllSubmatch(out, -1) {
		got[string(m[1])] = true
	}
	for _, fn := range want {
		if !got[fn] {
			t.Errorf("%s is not inlinable any more", fn)
		}
	}
}
