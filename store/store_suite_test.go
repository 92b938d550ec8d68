package store_test

import (
	"fmt"
	"os"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/store/pgtest"
)

func TestStore(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Store Suite")
}

// TestMain stops the package's PostgreSQL servers (started on first use by
// the specs and by the benchmarks) when every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	stopBenchPG()
	if err := pgtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "stop PostgreSQL:", err)
	}
	os.Exit(code)
}

// requirePG returns the package's PostgreSQL server, started on first use,
// and skips the spec loudly when PostgreSQL is not installed.
func requirePG() *pgtest.Server {
	srv, err := pgtest.SharedOrSkip(Skip)
	Expect(err).NotTo(HaveOccurred())
	return srv
}
