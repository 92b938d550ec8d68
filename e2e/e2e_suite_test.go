// Package e2e drives the built iac-code binary as a subprocess: with a raw
// JSON-RPC client for exact wire assertions and with the real ACP SDKs. The
// model is the scripted fake OpenAI-compatible server of llm/llmtest, reached
// over real HTTP by the server's real provider code.
package e2e

import (
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
// when a fresh clone has no node_modules yet.
func ensureNodeModules() {
	wd, _ := os.Getwd()
	dir := filepath.Join(wd, "node")
	installed := true
	for _, pkg := range []string{"@agentclientprotocol/sdk", "@modelcontextprotocol/server-everything", "acpx", "acp-factory", "ws"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			installed = false
		}
	}
	if installed {
		return
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
	Expect(cmd.Run()).To(Succeed(), "npm ci in e2e/node")
}
