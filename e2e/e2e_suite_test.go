// Package e2e drives the built iac-code binary as a subprocess: with a raw
// JSON-RPC client for exact wire assertions and with the real ACP SDKs. The
// model is the scripted fake OpenAI-compatible server of llm/llmtest, reached
// over real HTTP by the server's real provider code.
package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"

	"github.com/iac-code/iac-code/store/pgtest"
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteCfg, reporterCfg := GinkgoConfiguration()
	if f := os.Getenv("IAC_CODE_LABEL_FILTER"); f != "" {
		suiteCfg.LabelFilter = f
	}
	RunSpecs(t, "E2E Suite", suiteCfg, reporterCfg)
}

var (
	binPath  string
	nodeDir  string
	schemaV1 *acpSchema
)

var _ = SynchronizedBeforeSuite(func() []byte {
	// The e2etest tag compiles in test-only hooks (a provider and a tool
	// that panic on request); the shipped binary has none.
	bin, err := gexec.Build("github.com/iac-code/iac-code/cmd/iac-code", "-tags", "e2etest", "-race")
	Expect(err).NotTo(HaveOccurred())
	ensureNodeModules()
	return []byte(bin)
}, func(bin []byte) {
	binPath = string(bin)
	wd, err := os.Getwd()
	Expect(err).NotTo(HaveOccurred())
	nodeDir = filepath.Join(wd, "node")
	schemaV1 = loadSchema(filepath.Join(nodeDir, "node_modules", "@agentclientprotocol", "sdk", "schema", "v1", "schema.json"))
})

// The PostgreSQL server of the specs that need one (started on first use)
// stops with each process.
var _ = SynchronizedAfterSuite(func() { _ = pgtest.StopShared() }, func() { gexec.CleanupBuildArtifacts() })

// ensureNodeModules installs the Node harness from its committed lockfile
// when node_modules is missing or was installed from another lockfile (a
// checkout that gained a package since): a stamp in node_modules records
// the digest of the lockfile it was installed from.
func ensureNodeModules() {
	wd, _ := os.Getwd()
	dir := filepath.Join(wd, "node")
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	Expect(err).NotTo(HaveOccurred())
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(dir, "node_modules", ".iac-code-lockfile-sha256")
	if have, err := os.ReadFile(stamp); err == nil && string(have) == want {
		return
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
	Expect(cmd.Run()).To(Succeed(), "npm ci in e2e/node")
	Expect(os.WriteFile(stamp, []byte(want), 0o644)).To(Succeed())
}
