package release

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The registry entry committed for the ACP Registry, its schema (copied
// from agentclientprotocol/registry, see its README) and icon.
var (
	registryDir  = filepath.Join("..", "..", "..", "deploy", "acp-registry")
	schemaPath   = filepath.Join(registryDir, "agent.schema.json")
	entryDir     = filepath.Join(registryDir, Name)
	committedRaw = filepath.Join(entryDir, ManifestFile)
)

// TestReleaseArchivesMatchTheManifest runs the release step for all five
// platforms on a stand-in main package (testdata/standin: the same
// `var version` as cmd/iac-code, a few KB instead of the server, so the
// cross-builds take seconds), then checks the manifest it wrote against the
// registry's schema and CI rules and against the archives: each URL names
// an archive that was made, listed in SHA256SUMS with its real sum, holding
// the cmd executable; the host's archive runs and reports the version.
func TestReleaseArchivesMatchTheManifest(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	const version = "9.8.7"
	out := t.TempDir()
	arts, err := Build(context.Background(), Options{Version: version, OutDir: out, ModuleDir: ".", Package: "./testdata/standin"})
	if err != nil {
		t.Fatal(err)
	}
	if len(arts) != len(Targets) {
		t.Fatalf("%d archives for %d targets", len(arts), len(Targets))
	}
	raw, err := os.ReadFile(filepath.Join(out, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateSchema(schemaPath, raw); err != nil {
		t.Fatalf("the manifest written is not valid against agent.schema.json: %v", err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, e := range CheckRegistryRules(m, Name) {
		t.Error(e)
	}
	sums, err := ReadSums(filepath.Join(out, SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != len(m.Distribution.Binary) {
		t.Errorf("SHA256SUMS lists %d archives, the manifest %d", len(sums), len(m.Distribution.Binary))
	}
	host := runtime.GOOS + "/" + runtime.GOARCH
	ranHost := false
	for _, tgt := range Targets {
		entry, ok := m.Distribution.Binary[tgt.Platform]
		if !ok {
			t.Errorf("no manifest entry for %s", tgt.Platform)
			continue
		}
		u, _ := url.Parse(entry.Archive)
		name := path.Base(u.Path)
		file := filepath.Join(out, name)
		sum, err := fileSHA256(file)
		if err != nil {
			t.Errorf("%s: the manifest's archive %s was not made: %v", tgt.Platform, name, err)
			continue
		}
		if sums[name] != sum {
			t.Errorf("%s: SHA256SUMS says %q, the archive is %s", tgt.Platform, sums[name], sum)
		}
		bin, mode := extract(t, file, strings.TrimPrefix(entry.Cmd, "./"))
		if tgt.GOOS != "windows" && mode&0o111 == 0 {
			t.Errorf("%s: %s is not executable (%v)", tgt.Platform, entry.Cmd, mode)
		}
		if tgt.GOOS+"/"+tgt.GOARCH == host {
			ranHost = true
			exe := filepath.Join(t.TempDir(), "iac-code")
			if err := os.WriteFile(exe, bin, 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := exec.Command(exe, "--version").Output()
			if err != nil || strings.TrimSpace(string(got)) != "iac-code "+version {
				t.Errorf("the host's binary says %q (%v), want the version stamped in", got, err)
			}
		}
	}
	if !ranHost && runtime.GOOS != "windows" {
		t.Logf("no release target for %s: the binaries were not run", host)
	}

	again := t.TempDir()
	if _, err := Build(context.Background(), Options{Version: version, OutDir: again, ModuleDir: ".", Package: "./testdata/standin",
		Targets: Targets[3:4]}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(out, Targets[3].Archive(version)))
	b, _ := os.ReadFile(filepath.Join(again, Targets[3].Archive(version)))
	if !bytes.Equal(a, b) {
		t.Error("the same sources gave different archive bytes")
	}
}

// extract returns the file name of the archive and its mode.
func extract(t *testing.T, archive, name string) ([]byte, os.FileMode) {
	t.Helper()
	if strings.HasSuffix(archive, ".zip") {
		zr, err := zip.OpenReader(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		for _, f := range zr.File {
			if f.Name == name {
				rc, err := f.Open()
				if err != nil {
					t.Fatal(err)
				}
				defer rc.Close()
				data, _ := io.ReadAll(rc)
				return data, f.Mode()
			}
		}
		t.Fatalf("%s has no %s", archive, name)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("%s has no %s: %v", archive, name, err)
		}
		if hdr.Name == name {
			data, _ := io.ReadAll(tr)
			return data, os.FileMode(hdr.Mode)
		}
	}
}

// TestCommittedEntry checks deploy/acp-registry/iac-code: agent.json is
// valid against the schema and the CI rules and is exactly what the
// release step writes for its version; the icon passes the CI's checks.
func TestCommittedEntry(t *testing.T) {
	raw, err := os.ReadFile(committedRaw)
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateSchema(schemaPath, raw); err != nil {
		t.Fatalf("%s: %v", committedRaw, err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, e := range CheckRegistryRules(m, filepath.Base(entryDir)) {
		t.Error(e)
	}
	want, _ := json.MarshalIndent(NewManifest(m.Version, DefaultDownloadBase, Targets), "", "  ")
	if string(raw) != string(want)+"\n" {
		t.Errorf("%s is not what `task release VERSION=%s` writes:\n%s", committedRaw, m.Version, want)
	}
	icon, err := os.ReadFile(filepath.Join(entryDir, "icon.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range CheckIcon(string(icon)) {
		t.Error(e)
	}
}

// TestRulesRefuseWhatTheRegistryRefuses: each rule of the registry's CI,
// broken once.
func TestRulesRefuseWhatTheRegistryRefuses(t *testing.T) {
	good := NewManifest("1.2.3", DefaultDownloadBase, Targets)
	if errs := CheckRegistryRules(good, Name); len(errs) > 0 {
		t.Fatalf("a good manifest refused: %v", errs)
	}
	schemaOK := func(m Manifest) error {
		raw, _ := json.Marshal(m)
		return ValidateSchema(schemaPath, raw)
	}
	if err := schemaOK(good); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m *Manifest)) Manifest {
		m := NewManifest("1.2.3", DefaultDownloadBase, Targets)
		f(&m)
		return m
	}
	setArchive := func(platform, archive string) func(m *Manifest) {
		return func(m *Manifest) {
			e := m.Distribution.Binary[platform]
			e.Archive = archive
			m.Distribution.Binary[platform] = e
		}
	}
	for name, m := range map[string]Manifest{
		"id not the folder":   edit(func(m *Manifest) { m.ID = "iac" }),
		"pre-release version": edit(func(m *Manifest) { m.Version = "1.2.3-rc1" }),
		"latest URL":          edit(setArchive("linux-x86_64", "https://github.com/iac-code/iac-code/releases/latest/download/iac-code-linux-amd64.tar.gz")),
		"other version":       edit(setArchive("linux-x86_64", "https://github.com/iac-code/iac-code/releases/download/v1.2.2/iac-code-1.2.2-linux-amd64.tar.gz")),
		"not an archive":      edit(setArchive("linux-x86_64", "https://github.com/iac-code/iac-code/releases/download/v1.2.3/iac-code-1.2.3-linux-amd64")),
		"no windows":          edit(func(m *Manifest) { delete(m.Distribution.Binary, "windows-x86_64") }),
		"other args": edit(func(m *Manifest) {
			e := m.Distribution.Binary["darwin-aarch64"]
			e.Args = []string{"serve"}
			m.Distribution.Binary["darwin-aarch64"] = e
		}),
	} {
		if errs := CheckRegistryRules(m, Name); len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
	bad := edit(func(m *Manifest) { m.Distribution.Binary["solaris-sparc"] = m.Distribution.Binary["linux-x86_64"] })
	if schemaOK(bad) == nil {
		t.Error("the schema accepted an unknown platform: is it the registry's?")
	}
	for svg, ok := range map[string]bool{
		`<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><path fill="currentColor" d="M0 0h1v1z"/></svg>`: true,
		`<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><path fill="#000" d="M0 0h1v1z"/></svg>`:         false,
		`<svg xmlns="http://www.w3.org/2000/svg" width="24" height="24"><path fill="currentColor" d="M0 0h1v1z"/></svg>`: false,
		`<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><path style="stroke: red" d="M0 0"/></svg>`:      false,
	} {
		if errs := CheckIcon(svg); (len(errs) == 0) != ok {
			t.Errorf("icon %s: %v", svg, errs)
		}
	}
}
