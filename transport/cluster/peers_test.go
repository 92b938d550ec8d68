package cluster

import (
	"net"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/rs/zerolog"

	"github.com/iac-code/iac-code/transport/cluster/clusterpb"
)

var _ = Describe("a request to another pod", func() {
	It("waits for a pod slow to answer its ping, which may be serving the request, instead of failing it", func() {
		sys := actor.NewActorSystem()
		// A port that accepts: the pod is not gone, only slow.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(ln.Close)
		n := &Node{sys: sys, log: zerolog.New(GinkgoWriter)}
		n.peers = newPeers(n)
		slow := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			switch ctx.Message().(type) {
			case *clusterpb.Ping:
				// never answered in time: the check finds the pod unreachable
			case *clusterpb.Post:
				to := ctx.Sender()
				time.AfterFunc(pingTimeout+500*time.Millisecond, func() { sys.Root.Send(to, &clusterpb.Reply{Status: 202}) })
			}
		}))
		settled := make(chan struct{})
		close(settled)
		p := &peer{inc: "slow", addr: ln.Addr().String(), service: slow, settled: settled, gone: make(chan struct{})}
		n.peers.m[p.inc] = p

		res, err := n.forward(p, &clusterpb.Post{ConnId: "c"}, 5*time.Second)
		Expect(err).NotTo(HaveOccurred())
		Expect(res).To(Equal(&clusterpb.Reply{Status: 202}), "the answer the pod gave")
		Expect(n.peers.state(p)).To(Equal(unreachable), "its ping was not answered in time")

		By("another request (a hand-over, a share) ends once the pod is found unreachable: the store's leases decide")
		p.state = alive
		start := time.Now()
		_, err = n.request(p, &clusterpb.Post{ConnId: "c"}, 5*time.Second)
		Expect(err).To(MatchError(errUnreachable))
		Expect(time.Since(start)).To(BeNumerically("<", pingTimeout+500*time.Millisecond))
	})
})
