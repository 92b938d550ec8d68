package httpsse_test

import (
	"os"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestHTTPSSE(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteCfg, reporterCfg := GinkgoConfiguration()
	if f := os.Getenv("IAC_CODE_LABEL_FILTER"); f != "" {
		suiteCfg.LabelFilter = f
	}
	RunSpecs(t, "HTTP+SSE transport Suite", suiteCfg, reporterCfg)
}
