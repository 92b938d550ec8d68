package actors

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

func TestActors(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Actors Suite")
}
