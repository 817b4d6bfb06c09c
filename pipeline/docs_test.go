package pipeline

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The config examples in the docs are valid configs.
func TestDocsExamplesParse(t *testing.T) {
	block := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	n := 0
	for _, doc := range []string{"../docs/pipelines.md", "../docs/plugins.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range block.FindAllSubmatch(b, -1) {
			if !strings.HasPrefix(string(m[1]), "pipelines:") {
				continue
			}
			var wrapper struct {
				Pipelines yaml.Node `yaml:"pipelines"`
			}
			if err := yaml.Unmarshal(m[1], &wrapper); err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			inner, _ := yaml.Marshal(&wrapper.Pipelines)
			if _, err := ParseConfig(inner); err != nil {
				t.Errorf("%s example does not validate: %v\n%s", doc, err, m[1])
			}
			n++
		}
	}
	if n < 2 {
		t.Fatalf("found %d pipelines examples in the docs, want at least 2", n)
	}
}
