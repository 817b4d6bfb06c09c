package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// repoRoot finds the repository from this source file, so tests in any
// package (any working directory) find the image recipe.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// recipeHash must stay in step with e2e_recipe_hash in scripts/e2e-lib.sh:
// the sha256 of `sha256sum`-style lines for scripts/e2e-images.sh and every
// file under e2e/images in byte order, first 12 hex digits.
func recipeHash(root string) (string, error) {
	files := []string{"scripts/e2e-images.sh"}
	var recipe []string
	err := filepath.WalkDir(filepath.Join(root, "e2e", "images"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		recipe = append(recipe, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("reading the image recipe: %w", err)
	}
	slices.Sort(recipe)
	var lines strings.Builder
	for _, f := range append(files, recipe...) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", fmt.Errorf("reading the image recipe: %w", err)
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(&lines, "%s  %s\n", hex.EncodeToString(sum[:]), f)
	}
	sum := sha256.Sum256([]byte(lines.String()))
	return hex.EncodeToString(sum[:])[:12], nil
}

// imageNames returns the RabbitMQ and Placement images to run: the
// environment's choice, else the scour-built ones for the current recipe.
func imageNames() (rabbit, placement string, err error) {
	rabbit, placement = os.Getenv(EnvRabbitMQImage), os.Getenv(EnvPlacementImage)
	if rabbit != "" && placement != "" {
		return rabbit, placement, nil
	}
	h, err := recipeHash(repoRoot())
	if err != nil {
		return "", "", err
	}
	if rabbit == "" {
		rabbit = "localhost/scour-e2e-rabbitmq:" + h
	}
	if placement == "" {
		placement = "localhost/scour-e2e-placement:" + h
	}
	return rabbit, placement, nil
}

// glanceImage is the Glance image to run: the environment's choice, else
// the scour-built one for the current recipe.
func glanceImage() (string, error) {
	if img := os.Getenv(EnvGlanceImage); img != "" {
		return img, nil
	}
	h, err := recipeHash(repoRoot())
	if err != nil {
		return "", err
	}
	return "localhost/scour-e2e-glance:" + h, nil
}

// keystoneImage is the Keystone image to run: the environment's choice,
// else the scour-built one for the current recipe.
func keystoneImage() (string, error) {
	if img := os.Getenv(EnvKeystoneImage); img != "" {
		return img, nil
	}
	h, err := recipeHash(repoRoot())
	if err != nil {
		return "", err
	}
	return "localhost/scour-e2e-keystone:" + h, nil
}
