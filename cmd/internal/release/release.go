// Package release makes the archives an editor's agent registry installs:
// the server cross-built for each platform the ACP Registry names, packed
// as the registry expects (.tar.gz, .zip on Windows, the binary at the
// archive's root), their SHA-256 sums, and the registry entry (agent.json)
// for that version. cmd/release is its command line (`task release`).
package release

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Target is one platform of the release.
type Target struct {
	GOOS, GOARCH string
	// Platform is the registry's name for it (agent.schema.json).
	Platform string
}

// Targets are the platforms released: the registry needs one build per
// operating system at least; these are the ones users run.
var Targets = []Target{
	{"darwin", "arm64", "darwin-aarch64"},
	{"darwin", "amd64", "darwin-x86_64"},
	{"linux", "arm64", "linux-aarch64"},
	{"linux", "amd64", "linux-x86_64"},
	{"windows", "amd64", "windows-x86_64"},
}

// Binary is the executable's name in the archive.
func (t Target) Binary() string {
	if t.GOOS == "windows" {
		return Name + ".exe"
	}
	return Name
}

// Archive is the archive's file name; it carries the version, as the
// registry's CI wants of the URL.
func (t Target) Archive(version string) string {
	ext := ".tar.gz"
	if t.GOOS == "windows" {
		ext = ".zip"
	}
	return fmt.Sprintf("%s-%s-%s-%s%s", Name, version, t.GOOS, t.GOARCH, ext)
}

// Name is the agent's id in the registry (its folder name there) and the
// executable's name.
const Name = "iac-code"

// DefaultDownloadBase is where the archives of a version are published:
// GitHub releases, whose /download/v<version>/ the registry's CI reads the
// version from.
const DefaultDownloadBase = "https://github.com/iac-code/iac-code/releases/download"

// SumsFile lists "<sha256>  <archive>" lines, as sha256sum -c reads them.
const SumsFile = "SHA256SUMS"

// ManifestFile is the registry entry written beside the archives.
const ManifestFile = "agent.json"

// versionPattern: numeric x.y.z only. The registry's CI parses the version
// out of the archive URL with [\d.]+, so a pre-release suffix would not
// match the entry's version.
var versionPattern = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// CheckVersion refuses what the registry would.
func CheckVersion(v string) error {
	if !versionPattern.MatchString(v) {
		return fmt.Errorf("version %q: want a numeric x.y.z (the registry matches it in the archive URLs)", v)
	}
	return nil
}

// Options of Build.
type Options struct {
	Version string
	// OutDir receives the archives, SHA256SUMS and agent.json.
	OutDir string
	// ModuleDir is where `go build` runs; Package the main package built
	// (default ./cmd/iac-code). It must have `var version string` in main.
	ModuleDir, Package string
	// Targets default to Targets.
	Targets []Target
	// DownloadBase defaults to DefaultDownloadBase.
	DownloadBase string
	// Log receives one line per archive (nil: none).
	Log io.Writer
}

// Artifact is one archive made.
type Artifact struct {
	Target Target
	Path   string
	SHA256 string
}

// Build cross-builds and packs every target, then writes SHA256SUMS and
// the manifest into OutDir.
func Build(ctx context.Context, o Options) ([]Artifact, error) {
	if err := CheckVersion(o.Version); err != nil {
		return nil, err
	}
	if o.Package == "" {
		o.Package = "./cmd/iac-code"
	}
	if o.Targets == nil {
		o.Targets = Targets
	}
	if o.DownloadBase == "" {
		o.DownloadBase = DefaultDownloadBase
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "iac-code-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	var out []Artifact
	for _, t := range o.Targets {
		bin := filepath.Join(work, t.GOOS+"-"+t.GOARCH, t.Binary())
		if err := goBuild(ctx, o, t, bin); err != nil {
			return nil, err
		}
		path := filepath.Join(o.OutDir, t.Archive(o.Version))
		if err := pack(t, bin, path); err != nil {
			return nil, fmt.Errorf("%s: %w", t.Platform, err)
		}
		sum, err := fileSHA256(path)
		if err != nil {
			return nil, err
		}
		out = append(out, Artifact{Target: t, Path: path, SHA256: sum})
		if o.Log != nil {
			fmt.Fprintf(o.Log, "%s  %s\n", sum, filepath.Base(path))
		}
	}
	if err := writeSums(filepath.Join(o.OutDir, SumsFile), out); err != nil {
		return nil, err
	}
	m, err := json.MarshalIndent(NewManifest(o.Version, o.DownloadBase, o.Targets), "", "  ")
	if err != nil {
		return nil, err
	}
	return out, os.WriteFile(filepath.Join(o.OutDir, ManifestFile), append(m, '\n'), 0o644)
}

// goBuild builds one static binary with the version stamped in.
func goBuild(ctx context.Context, o Options, t Target, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+o.Version, "-o", bin, o.Package)
	cmd.Dir = o.ModuleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+t.GOOS, "GOARCH="+t.GOARCH)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s/%s: %w\n%s", t.GOOS, t.GOARCH, err, stderr.String())
	}
	return nil
}

// archiveTime is every entry's modification time: the same sources give
// the same archive bytes.
var archiveTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pack writes the binary, alone at the archive's root (the manifest's cmd
// is ./<binary>), mode 0755.
func pack(t Target, bin, dst string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	if strings.HasSuffix(dst, ".zip") {
		err = writeZip(f, t.Binary(), data)
	} else {
		err = writeTarGz(f, t.Binary(), data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func writeTarGz(w io.Writer, name string, data []byte) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	hdr := &tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), ModTime: archiveTime,
		Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeZip(w io.Writer, name string, data []byte) error {
	zw := zip.NewWriter(w)
	hdr := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: archiveTime}
	hdr.SetMode(0o755)
	fw, err := zw.CreateHeader(hdr)
	if err != nil {
		return err
	}
	if _, err := fw.Write(data); err != nil {
		return err
	}
	return zw.Close()
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func writeSums(path string, arts []Artifact) error {
	lines := make([]string, 0, len(arts))
	for _, a := range arts {
		lines = append(lines, a.SHA256+"  "+filepath.Base(a.Path)+"\n")
	}
	sort.Strings(lines)
	return os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644)
}

// ReadSums parses a SHA256SUMS file: archive name → sum.
func ReadSums(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			return nil, fmt.Errorf("%s: malformed line %q", path, line)
		}
		sums[name] = sum
	}
	return sums, nil
}
