// Command release makes the archives and the ACP Registry entry of a
// version (see cmd/internal/release):
//
//	go run ./cmd/release -version 0.2.0 [-out dist/0.2.0] [-manifest deploy/acp-registry/iac-code/agent.json]
//
// `task release VERSION=0.2.0` runs it from the module root.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/iac-code/iac-code/cmd/internal/release"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run() error {
	version := flag.String("version", "", "the version to release, x.y.z")
	out := flag.String("out", "", "directory for the archives, SHA256SUMS and agent.json (default dist/<version>)")
	manifest := flag.String("manifest", filepath.Join("deploy", "acp-registry", release.Name, release.ManifestFile),
		"where to write the registry entry as well (empty: only in -out)")
	base := flag.String("download-base", release.DefaultDownloadBase, "URL the archives are published under (…/v<version>/<archive>)")
	manifestOnly := flag.Bool("manifest-only", false, "write the registry entry for -version to -manifest without building anything")
	flag.Parse()
	if *out == "" {
		*out = filepath.Join("dist", *version)
	}
	if err := release.CheckVersion(*version); err != nil {
		return err
	}
	var raw []byte
	if *manifestOnly {
		m, err := json.MarshalIndent(release.NewManifest(*version, *base, release.Targets), "", "  ")
		if err != nil {
			return err
		}
		raw = append(m, '\n')
	} else {
		if _, err := release.Build(context.Background(), release.Options{Version: *version, OutDir: *out,
			ModuleDir: ".", DownloadBase: *base, Log: os.Stdout}); err != nil {
			return err
		}
		var err error
		if raw, err = os.ReadFile(filepath.Join(*out, release.ManifestFile)); err != nil {
			return err
		}
	}
	if err := release.ValidateSchema(filepath.Join("deploy", "acp-registry", "agent.schema.json"), raw); err != nil {
		return fmt.Errorf("the manifest is not valid against the registry's schema: %w", err)
	}
	var m release.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	if errs := release.CheckRegistryRules(m, release.Name); len(errs) > 0 {
		return fmt.Errorf("the manifest breaks the registry's rules: %w", errors.Join(errs...))
	}
	if *manifest != "" {
		if err := os.WriteFile(*manifest, raw, 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", *manifest)
	}
	if !*manifestOnly {
		fmt.Println("wrote", filepath.Join(*out, release.SumsFile), "and", filepath.Join(*out, release.ManifestFile))
	}
	return nil
}
