// Command mutation proves that the unit tests guard the decisions behind
// the five safety rules (README, docs/lifecycle.md): it applies each
// deliberate small mutation in mutations.go to its file through
// `go test -overlay` (the working tree is never written), runs the unit
// tests named for it without containers (SCOUR_TEST_UNIT_ONLY=1, -short),
// and fails if any mutation survives (its tests still pass), does not
// apply (its text is not found exactly once), or does not build.
//
//	go run ./scripts/mutation            # every mutation
//	go run ./scripts/mutation -rule 2    # one rule's
//	go run ./scripts/mutation -list      # the table, as docs/lifecycle.md lists it
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	rule := flag.Int("rule", 0, "run only this safety rule's mutations (1-5; 0: all)")
	jobs := flag.Int("j", 2, "mutations tested at once")
	list := flag.Bool("list", false, "print the mutations as a Markdown table and exit")
	flag.Parse()
	if *list {
		printTable()
		return
	}
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		fail(fmt.Errorf("run from the repository root (no go.mod in %s)", root))
	}
	tmp, err := os.MkdirTemp("", "scour-mutation-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	perRule := map[int]int{}
	var todo []int
	for i, m := range mutations {
		if *rule == 0 || m.Rule == *rule {
			perRule[m.Rule]++
			todo = append(todo, i)
		}
	}
	type outcome struct {
		verdict, detail string
		took            time.Duration
	}
	results := make([]chan outcome, len(mutations))
	for _, i := range todo {
		results[i] = make(chan outcome, 1)
	}
	sem := make(chan struct{}, max(*jobs, 1))
	start := time.Now()
	for _, i := range todo {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t0 := time.Now()
			v, d := run(root, tmp, i, mutations[i])
			results[i] <- outcome{v, d, time.Since(t0)}
		}()
	}
	var bad []string
	for _, i := range todo {
		m, o := mutations[i], <-results[i]
		fmt.Printf("rule %d  %-9s %-62s %5.1fs\n", m.Rule, o.verdict, m.Name, o.took.Seconds())
		if o.verdict != "killed" {
			bad = append(bad, fmt.Sprintf("rule %d %q (%s, tests %s): %s\n%s", m.Rule, m.Name, m.File, m.Run, o.verdict, o.detail))
		}
	}
	for r := 1; r <= 5; r++ {
		if (*rule == 0 || *rule == r) && perRule[r] < 3 {
			bad = append(bad, fmt.Sprintf("rule %d has %d mutation(s); at least 3 are required", r, perRule[r]))
		}
	}
	fmt.Printf("%d mutation(s) in %s\n", len(todo), time.Since(start).Round(time.Second))
	if len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "\nFAIL: %d problem(s):\n%s\n", len(bad), strings.Join(bad, "\n"))
		os.Exit(1)
	}
	fmt.Println("every mutation was caught by a unit test")
}

// run applies m through an overlay and runs its tests: "killed" when they
// fail, "SURVIVED" when they pass, "INVALID" when m does not apply or the
// mutant does not build.
func run(root, tmp string, i int, m mutation) (string, string) {
	path := filepath.Join(root, m.File)
	src, err := os.ReadFile(path)
	if err != nil {
		return "INVALID", err.Error()
	}
	if n := strings.Count(string(src), m.Old); n != 1 {
		return "INVALID", fmt.Sprintf("the text to mutate occurs %d times in %s (want exactly 1): update mutations.go with the code", n, m.File)
	}
	mutant := filepath.Join(tmp, fmt.Sprintf("m%d_%s", i, filepath.Base(m.File)))
	if err := os.WriteFile(mutant, []byte(strings.Replace(string(src), m.Old, m.New, 1)), 0o644); err != nil {
		return "INVALID", err.Error()
	}
	overlay := filepath.Join(tmp, fmt.Sprintf("m%d.json", i))
	b, _ := json.Marshal(map[string]map[string]string{"Replace": {path: mutant}})
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		return "INVALID", err.Error()
	}
	cmd := exec.Command("go", "test", "-count=1", "-short", "-vet=off", "-overlay", overlay, "-run", m.Run, "./"+m.Pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "SCOUR_TEST_UNIT_ONLY=1")
	out, err := cmd.CombinedOutput()
	text := string(out)
	switch {
	case err == nil:
		return "SURVIVED", tail(text)
	case strings.Contains(text, "[build failed]") || strings.Contains(text, "[setup failed]"):
		return "INVALID", "the mutant does not build:\n" + tail(text)
	case !strings.Contains(text, "--- FAIL"):
		return "INVALID", "the tests failed without a failing test:\n" + tail(text)
	}
	return "killed", ""
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

func printTable() {
	fmt.Println("| rule | mutation | file | caught by |")
	fmt.Println("| --- | --- | --- | --- |")
	for _, m := range mutations {
		fmt.Printf("| %d | %s | `%s` | `%s` |\n", m.Rule, m.Name, m.File, strings.ReplaceAll(m.Run, "|", "`, `"))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mutation:", err)
	os.Exit(2)
}
