package release

import (
	"bytes"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Manifest is an ACP Registry entry (agent.json), in the registry's field
// order. Its schema is deploy/acp-registry/agent.schema.json.
type Manifest struct {
	ID           string       `json:"id"`
	Name         string       `json:"name"`
	Version      string       `json:"version"`
	Description  string       `json:"description"`
	Repository   string       `json:"repository"`
	Authors      []string     `json:"authors"`
	Distribution Distribution `json:"distribution"`
}

// Distribution holds the binary archives only: iac-code is one static
// executable, so no npx or uvx package.
type Distribution struct {
	Binary map[string]BinaryTarget `json:"binary"`
}

// BinaryTarget is one platform's archive and what to run from it.
type BinaryTarget struct {
	Archive string   `json:"archive"`
	Cmd     string   `json:"cmd"`
	Args    []string `json:"args"`
}

// NewManifest is the entry for version, its archives under
// downloadBase/v<version>/.
func NewManifest(version, downloadBase string, targets []Target) Manifest {
	m := Manifest{
		ID:      Name,
		Name:    "iac-code",
		Version: version,
		Description: "AI coding agent for infrastructure as code, served over ACP " +
			"(stdio for one editor, HTTP for many)",
		Repository:   "https://github.com/iac-code/iac-code",
		Authors:      []string{"iac-code contributors"},
		Distribution: Distribution{Binary: map[string]BinaryTarget{}},
	}
	for _, t := range targets {
		m.Distribution.Binary[t.Platform] = BinaryTarget{
			Archive: strings.TrimSuffix(downloadBase, "/") + "/v" + version + "/" + t.Archive(version),
			Cmd:     "./" + t.Binary(),
			Args:    []string{"acp"},
		}
	}
	return m
}

// urlVersion is how the registry's CI (build_registry.py,
// extract_version_from_url) reads a version out of an archive URL.
var urlVersion = regexp.MustCompile(`/(?:download|releases)/v?([\d.]+)/`)

// CheckRegistryRules applies the registry CI's rules that its JSON schema
// does not state (build_registry.py at the commit in
// deploy/acp-registry/README.md): the id is the entry's folder name, the
// version is numeric x.y.z, every operating system has a build, archive
// URLs carry the version and never "latest", archives are .tar.gz or .zip.
// Also ours: every platform runs `<binary> acp`.
func CheckRegistryRules(m Manifest, folder string) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if m.ID != folder {
		bad("id %q must be the folder name %q", m.ID, folder)
	}
	if err := CheckVersion(m.Version); err != nil {
		bad("%v", err)
	}
	oses := map[string]bool{}
	for platform, t := range m.Distribution.Binary {
		oses[strings.SplitN(platform, "-", 2)[0]] = true
		u, err := url.Parse(t.Archive)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			bad("%s: archive %q is not an https URL", platform, t.Archive)
			continue
		}
		if strings.Contains(t.Archive, "/latest/") || strings.Contains(strings.ToLower(t.Archive), "latest") {
			bad("%s: archive URL %q names latest, not the version", platform, t.Archive)
		}
		if v := urlVersion.FindStringSubmatch(t.Archive); v == nil || normalize(v[1]) != m.Version {
			bad("%s: archive URL %q does not carry version %s where the registry reads it", platform, t.Archive, m.Version)
		}
		if !strings.Contains(path.Base(u.Path), m.Version) {
			bad("%s: archive name %q does not carry version %s", platform, path.Base(u.Path), m.Version)
		}
		if !strings.HasSuffix(u.Path, ".tar.gz") && !strings.HasSuffix(u.Path, ".zip") {
			bad("%s: archive %q is neither .tar.gz nor .zip", platform, t.Archive)
		}
		if len(t.Args) != 1 || t.Args[0] != "acp" {
			bad("%s: args %q, want [\"acp\"]", platform, t.Args)
		}
		if !strings.HasPrefix(t.Cmd, "./") {
			bad("%s: cmd %q is not a path inside the archive", platform, t.Cmd)
		}
	}
	for _, os := range []string{"darwin", "linux", "windows"} {
		if !oses[os] {
			bad("no build for %s (the registry wants every operating system)", os)
		}
	}
	return errs
}

// normalize pads a version to x.y.z, as the registry's CI does.
func normalize(v string) string {
	parts := strings.Split(strings.Trim(v, "."), ".")
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	return strings.Join(parts[:3], ".")
}

var (
	svgSize   = regexp.MustCompile(`<svg[^>]*\swidth=["'](\d+)["'][^>]*`)
	svgHeight = regexp.MustCompile(`<svg[^>]*\sheight=["'](\d+)`)
	paintAttr = regexp.MustCompile(`(?i)\b(fill|stroke)\s*[=:]\s*["']?([^"';\s>]+)`)
)

// CheckIcon applies the registry CI's icon rules (validate_icon): 16×16,
// square, monochrome: every fill and stroke currentColor, none or inherit,
// and currentColor used.
func CheckIcon(svg string) []error {
	var errs []error
	w, h := svgSize.FindStringSubmatch(svg), svgHeight.FindStringSubmatch(svg)
	if w == nil || h == nil || w[1] != "16" || h[1] != "16" {
		errs = append(errs, fmt.Errorf("icon must have width and height 16"))
	}
	for _, m := range paintAttr.FindAllStringSubmatch(svg, -1) {
		switch strings.ToLower(m[2]) {
		case "currentcolor", "none", "inherit":
		default:
			errs = append(errs, fmt.Errorf("icon has %s %q: use currentColor or none", m[1], m[2]))
		}
	}
	if !strings.Contains(strings.ToLower(svg), "currentcolor") {
		errs = append(errs, fmt.Errorf("icon must use currentColor"))
	}
	return errs
}

// ValidateSchema validates manifest (agent.json bytes) against the
// registry's agent.schema.json at schemaPath (draft-07).
func ValidateSchema(schemaPath string, manifest []byte) error {
	abs, err := filepath.Abs(schemaPath)
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat() // archive and repository are "format": "uri"
	sch, err := c.Compile(abs)
	if err != nil {
		return fmt.Errorf("compile %s: %w", schemaPath, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(manifest))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}
