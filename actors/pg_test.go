package actors

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/iac-code/iac-code/store/pgtest"
)

// requirePG returns the suite's PostgreSQL server, started on first use and
// stopped after the suite, and skips the spec loudly when PostgreSQL is not
// installed.
func requirePG() *pgtest.Server {
	srv, err := pgtest.SharedOrSkip(Skip)
	Expect(err).NotTo(HaveOccurred())
	return srv
}

var _ = AfterSuite(func() { Expect(pgtest.StopShared()).To(Succeed()) })
